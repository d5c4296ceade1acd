"""What prices shown below billing need from it (an organization's tax rate, the month's net so
far), without importing billing (it sits above catalog and orders in the import layers).

Billing registers its source once, in `BillingConfig.ready()`; a price asked for before that (a
misconfigured installation) raises instead of being shown without its tax.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Protocol

from portal.tenants.models import Organization
from tranche import money


@dataclass(frozen=True)
class TaxTerms:
    """The organization's tax rate and what its invoice of a month holds so far (net)."""

    rate_percent: Decimal
    currency: str
    month_net: Decimal


class TaxSource(Protocol):
    def rate(self, organization: Organization | None) -> Decimal: ...

    def terms(self, organization: Organization, at: datetime) -> TaxTerms: ...


_registry: dict[str, TaxSource] = {}


def register_tax_source(source: TaxSource) -> None:
    _registry["source"] = source


def _registered() -> TaxSource:
    if "source" not in _registry:
        raise RuntimeError(
            "billing has not registered its tax source (is portal.billing installed?)"
        )
    return _registry["source"]


def tax_rate(organization: Organization | None) -> Decimal:
    """The tax rate (percent) prices are shown with for `organization` (None: the default)."""
    return _registered().rate(organization)


def tax_terms(organization: Organization, at: datetime) -> TaxTerms:
    return _registered().terms(organization, at)


def gross(net: Decimal, rate_percent: Decimal) -> Decimal:
    """A shown amount including its own tax (rounded once, as one invoice line alone would be)."""
    return net + money.tax_of(net, rate_percent)
