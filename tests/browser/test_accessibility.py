"""axe-core (vendored from npm, tests/helpers/axe.py) on every tenant page in chromium against a
real daphne: sign-up, catalogue, order confirmation, quota (with its CPU/RAM banner), manifest,
cluster access and its revoke confirmation, live status (rows, gauges, charts, warnings),
pre-flight (with `make run`'s sample images), billing, organization and project deletion, and
an invitation: no serious or critical violation. Each page's screenshot is kept under the
test's tmp dir; the header is checked to fit one line at 1,280 px."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.test import Client
from playwright.sync_api import expect

from deploy.ociregistry.samples import SAMPLES
from portal.agents import history
from portal.agents.models import NodeToken, PodSliceStatus
from portal.cluster.models import PodState
from portal.tenants.services import invite_member
from tests.helpers.axe import axe_violations
from tests.helpers.factories import make_world
from tests.helpers.portal import serve_portal

GIB = 1024**3


def _context(browser, base: str, user=None):
    """A context that lets the test inject axe (CSP bypassed for the check only)."""
    context = browser.new_context(base_url=base, bypass_csp=True,
                                  viewport={"width": 1280, "height": 900})  # fmt: skip
    if user is not None:
        client = Client()
        client.force_login(user)
        session = client.cookies[settings.SESSION_COOKIE_NAME].value
        context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": base}])
    return context


def _live_data(world) -> None:
    project, ns = world.project_a, world.project_a.namespace
    now = datetime.now(tz=UTC)
    gpu = {"uuid": "GPU-1", "name": "Tesla V100-PCIE-32GB", "memory_total_bytes": 32 * GIB,
           "memory_used_bytes": 0}  # fmt: skip
    NodeToken.objects.create(node_name="kwok-gpu-0", token_hash="0" * 64, last_seen_at=now,
                             gpus=[gpu])  # fmt: skip
    PodSliceStatus.objects.create(
        project=project, node_name="kwok-gpu-0", namespace=ns, pod_name="train-0", pod_uid="u",
        gpu_uuid="GPU-1", memory_limit_bytes=8 * GIB, memory_used_bytes=5 * GIB,
        rejected_allocations=0, compute_target_percent=25, compute_used_percent=20.0,
        throttled_seconds=1.0, processes=1, reported_at=now,
    )  # fmt: skip
    history.record_samples(
        [history.Sample(project.pk, ns, "train-0", (now - timedelta(minutes=m)).timestamp(),
                        GIB * (1 + m % 4), 8 * GIB, 20.0, 25) for m in (300, 200, 30, 5)]
    )  # fmt: skip
    PodState.objects.create(
        project=project, namespace=ns, name="web-5f", kind="ReplicaSet", phase="NotCreated",
        reason="CPUQuotaExhausted", words="Requested 4 CPU; 7.5 of 8 CPU of the quota in use.",
        next_step="Lower the request or free CPU.",
        events=[["2026-12-01T10:00:00Z", "FailedCreate", "exceeded quota: tranche-quota"]],
    )  # fmt: skip


def test_every_tenant_page_has_no_serious_accessibility_violation(
    browser, transactional_db, tmp_path, monkeypatch
):
    # The pre-flight page as `make run` serves it: with its sample images and their manifests.
    samples = ",".join(f"127.0.0.1:8005/samples/{s.name}:1" for s in SAMPLES)
    monkeypatch.setenv("TRANCHE_PREFLIGHT_SAMPLE_IMAGES", samples)
    world = make_world()
    project, org = world.project_a, world.org_a
    product = world.products["tranche-v100-8g"]
    _live_data(world)
    _invitation, token = invite_member(
        membership=world.membership(world.owner), email="new@example.test", role="member"
    )
    pages = {
        "organization": f"/orgs/{org.pk}/",
        "catalogue": "/catalogue/",
        "confirm": f"/projects/{project.pk}/order/confirm/?product={product.pk}&quantity=1",
        "quota": f"/projects/{project.pk}/",
        "manifest": f"/projects/{project.pk}/manifests/{product.pk}/",
        "access": "/access/",
        "revoke": "/access/revoke/",
        "live": f"/projects/{project.pk}/status/",
        "preflight": f"/projects/{project.pk}/preflight/",
        "billing": f"/orgs/{org.pk}/billing/",
        "delete-project": f"/orgs/{org.pk}/projects/{project.pk}/delete/",
    }
    found: dict[str, list] = {}
    with serve_portal(connection.settings_dict["NAME"]) as portal:
        anonymous = _context(browser, portal.http_base)
        owner = _context(browser, portal.http_base, world.owner)
        try:
            page = anonymous.new_page()
            page.goto("/signup/")
            expect(page.get_by_role("button", name="Sign up")).to_be_visible()
            found["signup"] = axe_violations(page)
            page.screenshot(path=str(tmp_path / "signup.png"), full_page=True)
            # the check can fail: an image without a text alternative is a critical violation
            page.evaluate("document.body.appendChild(document.createElement('img')).src = 'data:,'")
            assert "image-alt" in {v["id"] for v in axe_violations(page)}
            page.goto(f"/invite/#{token}")
            expect(page.get_by_role("heading", name="Join Acme Labs")).to_be_visible()
            found["invitation"] = axe_violations(page)
            page.screenshot(path=str(tmp_path / "invitation.png"), full_page=True)

            page = owner.new_page()
            for name, url in pages.items():
                response = page.goto(url)
                assert response is not None
                assert response.status == 200, (name, url, response.status)
                if name == "live":
                    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
                    expect(page.locator('#charts figure[data-pod="train-0"] .uplot')).to_have_count(
                        2
                    )
                    page.locator("#cluster-pods details summary").first.click()
                if name == "preflight":
                    page.locator(".preflight-samples summary").first.click()
                    expect(page.locator(".sample-manifest").first).to_be_visible()
                found[name] = axe_violations(page)
                page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
                # the header fits one line at 1,280 px: every item on the same row
                tops = page.locator("header.top a, header.top select, header.top button")
                boxes = [tops.nth(i).bounding_box() for i in range(tops.count())]
                ys = [box["y"] for box in boxes if box]
                assert max(ys) - min(ys) < 16, (name, ys)  # a wrapped line is 30+ px lower
        finally:
            anonymous.close()
            owner.close()
    bad = {name: v for name, v in found.items() if v}
    assert bad == {}, bad
    assert set(found) == {"signup", "invitation", *pages}
