"""An invitee without an account joins with a name and a password only: the invitation page
asks for nothing else, makes no organization or project of their own, and lands them on the
organization they were invited to, signed in."""

from __future__ import annotations

from playwright.sync_api import expect

from portal.tenants.models import Membership, Organization, Project
from portal.tenants.services import invite_member
from tests.helpers.factories import make_world


def test_an_invitee_joins_with_a_name_and_a_password(new_page, transactional_db, tmp_path):
    world = make_world()
    _invitation, token = invite_member(
        membership=world.membership(world.owner), email="carol@example.test", role="member"
    )
    orgs, projects = Organization.objects.count(), Project.objects.count()
    page = new_page()
    page.goto(f"/invite/#{token}")
    expect(page.get_by_role("heading", name="Join Acme Labs")).to_be_visible()
    form = page.locator("#invited-signup")
    expect(form.locator("input:not([type=hidden])")).to_have_count(2)  # name, password
    form.get_by_label("Username").fill("carol")
    form.get_by_label("Password").fill("a-long-pass-42")
    page.screenshot(path=str(tmp_path / "invitation-form.png"), full_page=True)
    form.get_by_role("button", name="Create account and join Acme Labs").click()
    expect(page.get_by_text("Welcome! You joined Acme Labs.")).to_be_visible()
    expect(page.get_by_role("heading", name="Acme Labs")).to_be_visible()
    expect(page.get_by_role("button", name="Log out carol")).to_be_visible()
    member = Membership.objects.get(user__username="carol")
    assert (member.organization_id, member.role) == (world.org_a.pk, "member")
    assert (Organization.objects.count(), Project.objects.count()) == (orgs, projects)
