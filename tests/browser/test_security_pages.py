"""Issue #14 in a real browser: an invitation link opens through its #fragment (the token never
reaches the server's URL), the login page says when it is paused, a stale order confirmation in
a second tab is refused, and no page breaks under the Content-Security-Policy."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from playwright.sync_api import expect

from portal.tenants.models import Membership
from portal.tenants.services import invite_member
from tests.helpers.factories import PASSWORD, make_world


@pytest.fixture
def csp_violations():
    """Console messages of CSP violations seen by pages given to `watch(page)`."""
    seen: list[str] = []

    def watch(page):
        page.on(
            "console",
            lambda msg: seen.append(msg.text) if "Content Security Policy" in msg.text else None,
        )
        return page

    watch.seen = seen
    return watch


def _log_in(page, username: str, password: str = PASSWORD) -> None:
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def test_invitation_link_opens_through_its_fragment_and_joins_after_login(
    new_page, transactional_db, csp_violations
):
    world = make_world()
    _invitation, token = invite_member(
        membership=world.membership(world.owner), email=world.outsider.email, role="member"
    )
    page = csp_violations(new_page())
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(f"/invite/#{token}")
    expect(page.get_by_role("heading", name="Join Acme Labs")).to_be_visible()
    assert "#" not in page.url  # the fragment is cleared from the address bar
    page.locator("#main").get_by_role("link", name="Log in").click()
    _log_in(page, world.outsider.username)
    page.get_by_role("button", name="Join Acme Labs").click()
    expect(page.get_by_text("You joined Acme Labs.")).to_be_visible()
    assert Membership.objects.filter(user=world.outsider, organization=world.org_a).exists()
    assert not any(token in url for url in requested), "the token reached a server URL"
    assert csp_violations.seen == []


def test_login_page_says_it_is_paused_after_repeated_wrong_passwords(
    new_page, transactional_db, csp_violations
):
    world = make_world()
    page = csp_violations(new_page())
    page.goto("/login/")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        _log_in(page, world.owner.username, "not-the-password-1")
        expect(page.get_by_role("alert")).to_contain_text("did not match")
    _log_in(page, world.owner.username, "not-the-password-1")
    expect(page.get_by_role("heading", name="Log-in paused")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("paused for 15 minutes")
    assert csp_violations.seen == []


def test_a_stale_confirmation_in_another_tab_is_refused(new_page, transactional_db, csp_violations):
    world = make_world()
    page = csp_violations(new_page())
    page.goto("/login/")
    _log_in(page, world.owner.username)
    product = world.products["tranche-v100-8g"]
    confirm = f"/projects/{world.project_a.pk}/order/confirm/?product={product.pk}&quantity="
    first = page
    first.goto(confirm + "3")
    first.get_by_role("button", name=re.compile("^Confirm and pay")).click()
    expect(first.locator("#order-state")).to_have_text("Pending")
    # Tab one confirms 3 → 5; tab two places 3 → 1 before tab one submits.
    first.goto(confirm + "5")
    expect(first.locator("#change")).to_have_text("Resize from 3 to 5 slices")
    second = csp_violations(page.context.new_page())
    second.goto(confirm + "1")
    # 3 → 1 is a decrease: its button names the credit ("Confirm: … credit")
    second.get_by_role("button", name=re.compile("^Confirm")).click()
    expect(second.locator("#order-state")).to_have_text("Pending")
    first.get_by_role("button", name=re.compile("^Confirm and pay")).click()
    expect(first.get_by_role("alert")).to_contain_text("another order came first")
    second.goto(f"/projects/{world.project_a.pk}/")
    row = second.locator("#slices").get_by_role("row").filter(has_text="tranche-v100-8g")
    expect(row.locator("td").first).to_contain_text("1")
    assert csp_violations.seen == []
