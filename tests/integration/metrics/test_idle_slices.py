"""An idle slice (issue #33): the agent reports how long each slice has run under 1 %
kernel-busy; past the idle window the tenant's live page says so with what a day of it costs
(the price the tenant's order was confirmed at, 24 h of one slice as an invoice line rounds it),
the support console lists it, and a busy slice beside it is in neither. Through the real ingest
(`record_status` of a parsed frame) and the pages as their users see them. The alert on the
agent's metric is test_prometheus.py's."""

from __future__ import annotations

import json
import secrets
import time

import pytest
from django.utils import timezone

from portal.agents import services
from portal.core.redisconn import shared_client
from portal.orders.services import place_order
from tests.helpers.agent_loop import bind_pods
from tests.helpers.factories import make_staff
from tranche import money, pricing
from tranche.agent_protocol import parse_status

pytestmark = pytest.mark.django_db
GIB = 1024**3
NODE = "gpu-node-0"


def _pod(ns: str, name: str, idle: float) -> dict:
    return {
        "namespace": ns, "pod": name, "uid": f"uid-{name}", "gpu_uuid": "GPU-1",
        "memory_limit_bytes": 8 * GIB, "memory_used_bytes": 2 * GIB, "rejected_allocations": 0,
        "compute_target_percent": 25, "compute_used_percent": 0.0 if idle else 24.0,
        "throttled_seconds": 0.0, "processes": 1, "idle_seconds": idle,
    }  # fmt: skip


def test_an_idle_slice_is_on_the_live_page_and_the_support_console(world, client, settings):
    settings.IDLE_SLICE_SECONDS = 5  # the test's short window (6 h shipped)
    project, product = world.project_a, world.products["tranche-v100-8g"]
    place_order(membership=world.membership(world.owner), project=project, product=product,
                quantity=2, idempotency_key=secrets.token_hex(8))  # fmt: skip
    ns = project.namespace
    bind_pods(shared_client(2), project.pk, NODE, "idle-0", "busy-0")
    frame = json.dumps({
        "type": "status", "node": NODE, "seq": 1, "ts": time.time(), "full": True, "dropped": 0,
        "gpus": [{"uuid": "GPU-1", "name": "Tesla V100-PCIE-32GB",
                  "memory_total_bytes": 32 * GIB, "memory_used_bytes": 4 * GIB}],
        "pods": [_pod(ns, "idle-0", 6 * 3600.0), _pod(ns, "busy-0", 0.0)], "removed": [],
    })  # fmt: skip
    recorded = services.record_status(NODE, parse_status(frame, None, NODE))
    assert not recorded.refused, recorded.refused
    hours = pricing.hours_in_month(*pricing.month_of(timezone.now()))
    per_day = money.round_cents(product.monthly_price * 24 / hours)
    words = (
        f"The GPU slice of pod idle-0 has been idle for 6 h: you pay {per_day} EUR per day for it."
    )

    client.force_login(world.owner)
    page = client.get(f"/projects/{project.pk}/status/").content.decode()
    assert words in page
    assert "slice of pod busy-0" not in page
    client.force_login(world.outsider)  # another organization's page is not theirs to see
    assert client.get(f"/projects/{project.pk}/status/").status_code == 404

    client.force_login(make_staff("sue", "Support"))
    console = client.get("/support/").content.decode()
    assert f"{ns}/idle-0: {words}" in console
    assert "slice of pod busy-0" not in console
