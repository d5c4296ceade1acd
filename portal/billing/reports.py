"""Platform-wide reports for billing staff (admin only, never shown to tenants).

Utilisation per GPU model for one month, in card-hours so the three figures add up:
sold (entitled slice-hours x slice fraction) + idle = card-hours available; held (ledger
slice-hours x fraction) <= sold. Cards are the GPUs the registered node agents last reported
(revoked nodes excluded), counted for the whole month. Sales can exceed that (a node not yet
registered or since revoked, or more sold than the cards hold: quota is an entitlement, not a
reservation): idle is then 0, never negative, and the excess is its own figure, `oversold`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from portal.agents.models import NodeToken
from portal.billing.charges import subscription_months
from portal.billing.selectors import overlap_seconds, usage_in
from portal.catalog.models import Product
from tranche import pricing

HUNDRED = Decimal(100)


@dataclass(frozen=True)
class ModelUtilisation:
    gpu_model: str
    cards: int
    card_hours: Decimal
    sold_card_hours: Decimal
    held_card_hours: Decimal
    idle_card_hours: Decimal  # >= 0
    oversold_card_hours: Decimal  # sold beyond the card-hours available (>= 0)
    sold_slice_hours: int
    held_slice_hours: Decimal


def cards_per_model() -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for gpus in NodeToken.objects.filter(revoked_at__isnull=True).values_list("gpus", flat=True):
        for gpu in gpus or []:
            if isinstance(gpu, dict) and gpu.get("name"):
                counts[gpu["name"]] += 1
    return counts


def utilisation_by_model(
    year: int, month: int, now: datetime | None = None
) -> list[ModelUtilisation]:
    now = now or timezone.now()
    begin, end = pricing.month_start(year, month), pricing.month_end(year, month)
    hours = pricing.hours_in_month(year, month)
    products = {p.pk: p for p in Product.objects.select_related("gpu_model")}
    sold: dict[str, Decimal] = defaultdict(Decimal)
    sold_slices: dict[str, int] = defaultdict(int)
    for subs in subscription_months(None, year, month).values():
        for sub in subs:
            product = products[sub.product_id]
            slice_hours = sum(
                s.quantity * s.hours
                for s in pricing.hourly_segments(sub.start_quantity, list(sub.changes), year, month)
            )
            sold[product.gpu_model.name] += slice_hours * product.fraction_percent / HUNDRED
            sold_slices[product.gpu_model.name] += slice_hours
    held: dict[str, Decimal] = defaultdict(Decimal)
    held_slices: dict[str, Decimal] = defaultdict(Decimal)
    for record in usage_in(begin, end):
        product = products[record.product_id]
        slice_hours = Decimal(overlap_seconds(record, begin, end, now)) / 3600
        held[product.gpu_model.name] += slice_hours * product.fraction_percent / HUNDRED
        held_slices[product.gpu_model.name] += slice_hours
    cards = cards_per_model()
    names = sorted(set(cards) | set(sold) | set(held))
    q = Decimal("0.01")
    zero = Decimal(0)
    return [
        ModelUtilisation(
            gpu_model=name,
            cards=cards.get(name, 0),
            card_hours=Decimal(cards.get(name, 0) * hours),
            sold_card_hours=sold[name].quantize(q),
            held_card_hours=held[name].quantize(q),
            idle_card_hours=max(zero, cards.get(name, 0) * hours - sold[name]).quantize(q),
            oversold_card_hours=max(zero, sold[name] - cards.get(name, 0) * hours).quantize(q),
            sold_slice_hours=sold_slices[name],
            held_slice_hours=held_slices[name].quantize(q),
        )
        for name in names
    ]
