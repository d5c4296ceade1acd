"""The Cluster access page and the services behind it, without a cluster: who sees what, the
empty state, revocation and membership changes sending reconciles, and clear refusals."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from portal.access.models import ClusterAccess
from portal.audit.models import AuditLog
from portal.tenants import services
from portal.tenants.errors import NotAllowedError, ServiceError
from portal.tenants.models import Membership, Project

pytestmark = pytest.mark.django_db(transaction=True)  # on_commit hooks send the reconciles


def test_the_page_lists_the_callers_projects_with_their_rights(world, client_of):
    page = client_of(world.viewer).get(reverse("cluster_access")).content.decode()
    assert world.project_a.namespace in page
    assert world.project_b.namespace not in page
    assert "read only" in page
    assert "Revoke my credentials" in page
    assert f"{world.org_a.slug}/{world.project_a.slug}" in page


def test_every_project_page_links_to_cluster_access(world, client_of):
    quota = client_of(world.member).get(reverse("quota", args=[world.project_a.pk]))
    assert reverse("cluster_access").encode() in quota.content


def test_a_user_with_no_projects_sees_a_clear_empty_state(db, client_of):
    loner = get_user_model().objects.create_user("loner", "l@example.test", "x")
    client = client_of(loner)
    page = client.get(reverse("cluster_access")).content.decode()
    assert "You are not in any project yet" in page
    assert "download-kubeconfig" not in page
    resp = client.post(reverse("download_kubeconfig"), follow=True)
    assert "not a member of any project yet" in resp.content.decode()
    assert not ClusterAccess.objects.exists()


def test_anonymous_callers_are_sent_to_log_in(client):
    assert client.get(reverse("cluster_access")).status_code == 302
    assert client.post(reverse("download_kubeconfig")).status_code == 302
    assert client.post(reverse("revoke_credentials")).status_code == 302


def test_download_says_what_happened_when_the_cluster_cannot_be_reached(
    world, client_of, settings, tmp_path
):
    settings.CLUSTER_ACCESS_KUBECONFIG = str(tmp_path / "missing")
    settings.CONTROLLER_KUBECONFIG = ""
    resp = client_of(world.member).post(reverse("download_kubeconfig"), follow=True)
    text = resp.content.decode()
    assert "could not issue credentials right now" in text
    assert "try again" in text
    assert not ClusterAccess.objects.filter(issued_at__isnull=False).exists()


def test_revoking_raises_the_generation_and_reconciles_the_users_projects(
    world, client_of, sent_reconciles
):
    resp = client_of(world.member).post(reverse("revoke_credentials"), follow=True)
    assert "revoked" in resp.content.decode()
    assert ClusterAccess.objects.get(user=world.member).generation == 2
    assert sent_reconciles == [world.project_a.pk]
    client_of(world.member).post(reverse("revoke_credentials"))
    assert ClusterAccess.objects.get(user=world.member).generation == 3
    assert AuditLog.objects.filter(action="cluster_access.revoke").count() == 2


def test_owners_remove_members_and_the_projects_are_reconciled(world, sent_reconciles):
    owner, member = world.membership(world.owner), world.membership(world.member)
    with pytest.raises(NotAllowedError):
        services.remove_member(membership=member, member_id=owner.pk)
    with pytest.raises(ServiceError, match="last owner"):
        services.remove_member(membership=owner, member_id=owner.pk)
    with pytest.raises(ServiceError, match="not a member"):
        services.remove_member(membership=owner, member_id=world.membership(world.outsider).pk)
    services.remove_member(membership=owner, member_id=member.pk)
    assert not Membership.objects.filter(pk=member.pk).exists()
    assert sent_reconciles == [world.project_a.pk]


def test_projects_with_orders_are_kept_and_empty_ones_deleted(world, monkeypatch):
    retired: list[str] = []
    monkeypatch.setattr("portal.core.queue.send_retire_namespace", retired.append)
    owner, member = world.membership(world.owner), world.membership(world.member)
    spare = services.create_project(membership=owner, name="spare")
    with pytest.raises(NotAllowedError):
        services.delete_project(membership=member, project_id=spare.pk)
    with pytest.raises(ServiceError, match="does not exist"):
        services.delete_project(membership=owner, project_id=world.project_b.pk)
    from portal.orders.services import place_order

    place_order(
        membership=owner,
        project=world.project_a,
        product=world.products["tranche-v100-8g"],
        quantity=1,
        idempotency_key="k1",
    )
    with pytest.raises(ServiceError, match="order is still in progress"):
        services.delete_project(membership=owner, project_id=world.project_a.pk)
    services.delete_project(membership=owner, project_id=spare.pk)
    assert not Project.objects.filter(pk=spare.pk).exists()
    assert retired == [spare.namespace]


def test_suspension_and_resumption_reconcile_the_organizations_projects(world, sent_reconciles):
    services.suspend_organization(actor=None, organization_id=world.org_a.pk, reason="unpaid")
    assert sent_reconciles == [world.project_a.pk]
    services.resume_organization(actor=None, organization_id=world.org_a.pk)
    assert sent_reconciles == [world.project_a.pk, world.project_a.pk]


def test_the_organization_page_removes_members_for_owners_only(world, client_of, sent_reconciles):
    url = reverse("organization", args=[world.org_a.pk])
    viewer = world.membership(world.viewer)
    member = world.membership(world.member)
    refused = client_of(world.member).post(url, {"form": "remove_member", "target": viewer.pk})
    assert refused.status_code == 403
    assert Membership.objects.filter(pk=viewer.pk).exists()
    bad = client_of(world.owner).post(url, {"form": "remove_member", "target": "x" * 30})
    assert bad.status_code == 400
    done = client_of(world.owner).post(url, {"form": "remove_member", "target": member.pk})
    assert done.status_code == 302
    assert not Membership.objects.filter(pk=member.pk).exists()
    assert sent_reconciles == [world.project_a.pk]
