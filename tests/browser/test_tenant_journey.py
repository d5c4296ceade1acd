"""A tenant signs up, buys 2 x 8 GiB, sees order and quota, copies the manifest; another
organization's user cannot reach any of it."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from portal.catalog.seed import ensure_catalogue


def _sign_up(page, username: str, org: str) -> None:
    page.goto("/signup/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Email").fill(f"{username}@example.test")
    page.get_by_label("Password").fill("a-long-pass-42")
    page.get_by_label("Organization name").fill(org)
    page.get_by_label("Project name").fill("inference")
    page.get_by_role("button", name="Sign up").click()
    expect(page.get_by_role("heading", name="Quota of inference")).to_be_visible()


def test_sign_up_buy_quota_manifest_copy_and_isolation(new_page, transactional_db):
    ensure_catalogue()
    page = new_page()
    _sign_up(page, "alice", "Acme Labs")
    quota_url = page.url

    page.get_by_role("link", name="Catalogue", exact=True).click()
    row = page.get_by_role("row").filter(has_text="tranche-v100-8g")
    row.get_by_role("link", name=re.compile("^Buy for")).click()
    page.get_by_label("Slices the project should hold").fill("2")
    page.get_by_role("button", name="Review price").click()
    expect(page.locator("#monthly")).to_contain_text("180.00 EUR per month")
    expect(page.locator("#prorata")).to_contain_text("EUR")
    page.get_by_role("button", name=re.compile("^Confirm and pay")).click()
    expect(page.locator("#order-state")).to_have_text("Pending")
    order_url = page.url

    page.get_by_role("link", name="Orders", exact=True).click()
    expect(page.get_by_role("row").filter(has_text="tranche-v100-8g: 0 → 2")).to_be_visible()
    page.get_by_role("link", name="Quota", exact=True).click()
    slices = page.locator("#slices")
    expect(slices).to_contain_text("tranche-v100-8g")
    expect(
        slices.get_by_role("row").filter(has_text="tranche-v100-8g").locator("td").first
    ).to_contain_text("2")
    expect(page.get_by_text("entitlement, not a reservation")).to_be_visible()

    slices.get_by_role("link", name="Manifest").click()
    manifest = page.locator("#workload-yaml")
    expect(manifest).to_contain_text("resourceClaimTemplateName: tranche-v100-8g")
    page.get_by_role("button", name="Copy manifest").click()
    expect(page.locator("#copy-status")).to_have_text("Copied to the clipboard.")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == manifest.text_content()
    assert "kind: Deployment" in copied
    manifest_url = page.url

    other = new_page()
    _sign_up(other, "mallory", "Other Corp")
    for url in (quota_url, order_url, manifest_url):
        response = other.goto(url)
        assert response is not None
        assert response.status == 404, url
        expect(other.get_by_role("heading", name="Not found")).to_be_visible()
