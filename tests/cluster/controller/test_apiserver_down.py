"""Fault: the API server of the test's control plane frozen (SIGSTOP) for 30 s while an order
waits to be provisioned (issue #30: 40 orders sat in `provisioning` for 48 s while pages,
/readyz and the support console stayed green).

Within 10 s `/readyz?scope=controller` is 503 naming the API server, the tenant's order page
says provisioning is delayed and that the order is kept, and the support console has the
finding; all three clear once the API server runs again. The portal here is the test process's
own (Django's client), the probe the one every portal process runs (`portal.core.cluster`).
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.test import Client
from django.urls import reverse

from deploy.devcluster import launcher
from deploy.devcluster.components import all_components
from deploy.devcluster.config import load_settings
from portal.orders.backlog import CLUSTER_DOWN
from tests.helpers.factories import make_staff
from tests.helpers.wait import wait_for

CLASS = "tranche-v100-8g"
FROZEN_SECONDS = 30.0


def _apiserver_pid() -> int:
    settings = load_settings()
    (component,) = [c for c in all_components(settings) if c.name == "kube-apiserver"]
    pid = launcher.running_pid(settings, component)
    if pid is None:
        pytest.fail("the kube-apiserver of this worktree's control plane is not ours to stop")
    return pid


@pytest.mark.timeout(300)
def test_apiserver_down_is_seen_by_readiness_tenants_and_support(tenant, settings) -> None:
    settings.PROVISIONING_DELAYED_SECONDS = 600  # only the cluster's state is under test
    order = tenant.order(CLASS, 1)  # no worker here: it waits, as during an outage
    owner, staff = Client(), Client()
    owner.force_login(tenant.membership.user)
    staff.force_login(make_staff("support-api", "Support"))
    order_page = reverse("order_detail", args=[tenant.project.pk, order.pk])

    def controller_ready() -> bool:
        return Client().get("/readyz?scope=controller").status_code == 200

    def delayed() -> bool:
        return CLUSTER_DOWN in owner.get(order_page).content.decode()

    def console_finding() -> bool:
        return "Orders wait for the cluster" in staff.get("/support/").content.decode()

    def said() -> str:
        return str(Client().get("/readyz?scope=controller").json())

    wait_for(controller_ready, 30, "controller readiness before the freeze", said)
    assert owner.get(order_page).status_code == 200
    assert not delayed()
    pid = _apiserver_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        frozen = time.monotonic()
        wait_for(lambda: not controller_ready(), 10, "controller readiness to fail")
        not_ready = time.monotonic() - frozen
        body = Client().get("/readyz?scope=controller").json()
        assert body["checks"]["cluster"]["ok"] is False
        assert "API server" in body["message"]
        wait_for(delayed, 10, "the order page to say provisioning is delayed")
        page_said = time.monotonic() - frozen
        wait_for(console_finding, 10, "the support console's finding")
        while time.monotonic() - frozen < FROZEN_SECONDS:  # the outage lasts its 30 s
            assert not controller_ready()
            time.sleep(1)
    finally:
        os.kill(pid, signal.SIGCONT)
    resumed = time.monotonic()
    wait_for(controller_ready, 15, "controller readiness after the API server returned", said)
    cleared = time.monotonic() - resumed
    wait_for(lambda: not delayed(), 10, "the order page's notice to clear")
    wait_for(lambda: not console_finding(), 10, "the console's finding to clear")
    print(  # noqa: T201
        f"API server frozen {FROZEN_SECONDS:.0f}s: controller not ready after {not_ready:.1f}s, "
        f"order page delayed after {page_said:.1f}s ({body['message']}); ready again "
        f"{cleared:.1f}s after it resumed"
    )
