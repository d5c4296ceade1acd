"""Issue #14 item 12 (first half): a suspended organization cannot create projects."""

from __future__ import annotations

from django.urls import reverse

from portal.tenants.models import Project
from portal.tenants.services import suspend_organization


def test_a_suspended_organization_cannot_create_projects(world, client_of):
    suspend_organization(actor=None, organization_id=world.org_a.pk, reason="unpaid invoice")
    before = Project.objects.count()
    response = client_of(world.owner).post(
        reverse("organization", args=[world.org_a.pk]), {"form": "project", "name": "Sneaky"}
    )
    assert response.status_code == 403
    body = response.content.decode()
    assert "is suspended (unpaid invoice), so no new projects can be created" in body
    assert Project.objects.count() == before
