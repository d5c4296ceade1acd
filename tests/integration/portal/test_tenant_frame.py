"""The tenant frame (`tenants.selectors.tenant_frame`, one statement per page): the caller's
memberships and live projects only, in the navigation's order, and 404 for anything else."""

from __future__ import annotations

import pytest
from django.http import Http404
from django.utils import timezone

from portal.tenants.models import Membership, Organization, Project
from portal.tenants.selectors import tenant_frame


def test_the_frame_holds_the_callers_memberships_and_live_projects(world):
    empty = Organization.objects.create(name="Aardvark Empty", slug="aardvark-empty")
    Membership.objects.create(user=world.owner, organization=empty, role="viewer")
    gone = Project.objects.create(
        organization=world.org_a, name="gone", slug="gone", namespace="t-gone"
    )
    Project.all_objects.filter(pk=gone.pk).update(deleted_at=timezone.now())
    later = Project.objects.create(
        organization=world.org_a, name="zeta", slug="zeta", namespace="t-zeta"
    )

    frame = tenant_frame(world.owner)

    assert [m.organization.name for m in frame.memberships] == ["Aardvark Empty", "Acme Labs"]
    assert [m.role for m in frame.memberships] == ["viewer", "owner"]
    assert [p.pk for p in frame.projects] == [world.project_a.pk, later.pk]  # not `gone`
    project, membership = frame.project(world.project_a.pk)
    assert project.namespace == world.project_a.namespace
    assert project.organization.name == "Acme Labs"
    assert membership.role == Membership.Role.OWNER
    assert membership.organization_id == world.org_a.pk


@pytest.mark.parametrize("which", ["other tenant's", "deleted", "missing"])
def test_the_frame_says_404_for_a_project_not_the_callers(world, which):
    gone = Project.objects.create(
        organization=world.org_a, name="gone", slug="gone", namespace="t-gone"
    )
    Project.all_objects.filter(pk=gone.pk).update(deleted_at=timezone.now())
    project_id = {"other tenant's": world.project_b.pk, "deleted": gone.pk, "missing": 10**9}
    with pytest.raises(Http404):
        tenant_frame(world.owner).project(project_id[which])


def test_an_outsider_and_an_anonymous_caller_see_only_their_own(world):
    from django.contrib.auth.models import AnonymousUser

    assert [p.pk for p in tenant_frame(world.outsider).projects] == [world.project_b.pk]
    assert tenant_frame(AnonymousUser()).memberships == ()
