"""Shared test data: two organizations with owner/member/viewer/outsider, and the V100 catalogue.

Reused by portal, controller and agent tests. Everything goes through the portal services, so the
data looks exactly like production data (namespaces derived, memberships set).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from portal.catalog.models import Product
from portal.catalog.seed import ensure_catalogue
from portal.tenants.models import Membership, Organization, Project
from portal.tenants.services import sign_up

PASSWORD = "correct-horse-battery-9"


@dataclass
class World:
    """Organization A (owner, member, viewer) and organization B (whose owner is `outsider`)."""

    org_a: Organization
    project_a: Project
    owner: object
    member: object
    viewer: object
    org_b: Organization
    project_b: Project
    outsider: object
    products: dict[str, Product]

    def membership(self, user) -> Membership:
        return Membership.objects.select_related("organization", "user").get(user=user)


def make_tenant(username: str, org_name: str, project_name: str = "inference"):
    """A user owning a new organization with one project."""
    return sign_up(
        username=username,
        email=f"{username}@example.test",
        password=PASSWORD,
        organization_name=org_name,
        project_name=project_name,
    )


def make_staff(username: str, group: str | None = None):
    """A staff user, in `group` (Billing, Support: made with their permissions by migrations)."""
    user = get_user_model().objects.create_user(
        username=username, email=f"{username}@example.test", password=PASSWORD, is_staff=True
    )
    if group:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


def add_member(org: Organization, username: str, role: str):
    """A user with `role` in `org`."""
    user = get_user_model().objects.create_user(
        username=username, email=f"{username}@example.test", password=PASSWORD
    )
    Membership.objects.create(user=user, organization=org, role=role)
    return user


def make_world() -> World:
    """Build the two-organization fixture (call inside a test with database access)."""
    products = {p.device_class: p for p in ensure_catalogue()}
    owner, org_a, project_a = make_tenant("alice", "Acme Labs")
    outsider, org_b, project_b = make_tenant("mallory", "Other Corp")
    return World(
        org_a=org_a,
        project_a=project_a,
        owner=owner,
        member=add_member(org_a, "bob", Membership.Role.MEMBER),
        viewer=add_member(org_a, "victor", Membership.Role.VIEWER),
        org_b=org_b,
        project_b=project_b,
        outsider=outsider,
        products=products,
    )
