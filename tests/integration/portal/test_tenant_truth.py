"""What tenants see is true (issue #32): an invitation accepted with a name and a password only;
a project whose orders all ended is deleted from a confirmation page and kept for billing; the
quota page says 0 once the watcher saw the namespace, names every waiting pod and warns when a
workload waits on CPU/RAM; revoking credentials confirms first."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.cluster.models import PodState, ProjectUsage, QuotaUse
from portal.cluster.services import pending_text
from portal.core import figures
from portal.orders.models import Order, Subscription
from portal.tenants import selectors, services
from portal.tenants.errors import ServiceError
from portal.tenants.models import Membership, Organization, Project

pytestmark = pytest.mark.django_db(transaction=True)  # on_commit hooks send the retire task
PASSWORD = "a-long-pass-42"


def _open(client, world) -> str:
    _inv, token = services.invite_member(
        membership=world.membership(world.owner), email="new@example.test", role="viewer"
    )
    client.post(reverse("accept_invitation"), {"token": token})
    return token


def test_invitation_needs_only_a_name_and_a_password(world, client):
    _open(client, world)
    page = client.get(reverse("accept_invitation")).content.decode()
    assert 'name="username"' in page
    assert 'name="password"' in page
    assert "organization_name" not in page
    assert "project_name" not in page
    orgs, projects = Organization.objects.count(), Project.objects.count()
    # a taken name or a weak password: a clear error, nothing created
    bad = client.post(reverse("accept_invitation"), {"username": "alice", "password": PASSWORD})
    assert bad.status_code == 400
    assert "already taken" in bad.content.decode()
    weak = client.post(reverse("accept_invitation"), {"username": "newbie", "password": "1234"})
    assert weak.status_code == 400
    assert not Membership.objects.filter(user__username="newbie").exists()
    ok = client.post(reverse("accept_invitation"), {"username": "newbie", "password": PASSWORD})
    assert ok.status_code == 302
    assert ok["Location"] == reverse("organization", args=[world.org_a.pk])
    member = Membership.objects.get(user__username="newbie")
    assert (member.organization, member.role, member.user.email) == (
        world.org_a, "viewer", "new@example.test"
    )  # fmt: skip
    assert (Organization.objects.count(), Project.objects.count()) == (orgs, projects)
    assert client.get(reverse("quota", args=[world.project_a.pk])).status_code == 200


def _ordered_and_ended(world) -> Project:
    owner = world.membership(world.owner)
    project = services.create_project(membership=owner, name="old")
    product = world.products["tranche-v100-8g"]
    sub = Subscription.objects.create(project=project, product=product, quantity=1)
    Order.objects.create(
        organization=world.org_a, project=project, product=product, subscription=sub,
        kind="buy", from_quantity=0, quantity=1, state="active", idempotency_key="k-old",
        unit_monthly_price=90, monthly_total=90, prorata_charge=3, currency="EUR",
        placed_by=world.owner,
    )  # fmt: skip
    return project


def test_a_project_whose_orders_ended_is_deleted_and_kept_for_billing(
    world, client_of, monkeypatch
):
    retired: list[str] = []
    monkeypatch.setattr("portal.core.queue.send_retire_namespace", retired.append)
    project = _ordered_and_ended(world)
    client = client_of(world.owner)
    url = reverse("delete_project", args=[world.org_a.pk, project.pk])
    # it still holds a slice: the page says why before any click, and a post changes nothing
    page = client.get(url).content.decode()
    assert 'id="delete-blocked"' in page
    assert f"holds 1 x {world.products['tranche-v100-8g'].name}" in page
    assert client.post(url).status_code == 400
    assert Project.objects.filter(pk=project.pk).exists()
    Subscription.objects.filter(project=project).update(quantity=0)  # cancelled
    page = client.get(url).content.decode()
    assert 'id="delete-consequences"' in page
    assert f"delete the namespace <code>{project.namespace}</code>" in page
    assert "Its orders, usage and invoices are <strong>kept</strong>" in page
    assert 'class="danger"' in page
    assert client.post(url).status_code == 302
    assert not Project.objects.filter(pk=project.pk).exists()  # gone from every page
    kept = Project.all_objects.get(pk=project.pk)
    assert kept.deleted_at is not None
    assert Order.objects.filter(project_id=project.pk).count() == 1  # billing history kept
    assert not selectors.projects_of(world.owner).filter(pk=project.pk).exists()
    assert client.get(reverse("quota", args=[project.pk])).status_code == 404
    assert retired == [project.namespace]
    # its name stays taken by the history: a new project of the same name gets its own slug
    again = services.create_project(membership=world.membership(world.owner), name="old")
    assert again.namespace != project.namespace
    with pytest.raises(ServiceError, match="does not exist"):
        services.delete_project(membership=world.membership(world.owner), project_id=project.pk)


def test_quota_page_says_zero_names_every_waiting_pod_and_flags_cpu_waits(world, client_of):
    project = world.project_a
    product = world.products["tranche-v100-8g"]
    Subscription.objects.create(project=project, product=product, quantity=2)
    client = client_of(world.member)
    url = reverse("quota", args=[project.pk])
    assert "not yet reported" in client.get(url).content.decode()
    QuotaUse.objects.create(project=project, cpu_used_millicores=8000, memory_used_mib=1024)
    figures.changed(project.pk)  # written here by hand: say so, as the watcher's writers do
    page = client.get(url).content.decode()
    assert "not yet reported" not in page  # the watcher saw it: nothing claimed is 0
    assert "<td>0</td>" in page
    assert "full: new pods wait" in page
    assert 'id="cpu-ram-wait"' not in page
    PodState.objects.create(
        project=project, namespace=project.namespace, name="web-5f", kind="ReplicaSet",
        phase="NotCreated", reason="CPUQuotaExhausted",
        words="Requested 4 CPU, 8 of 8 CPU of the quota in use, headroom 0.",
    )  # fmt: skip
    ProjectUsage.objects.create(
        project=project, product=product, allocated=1, pending=2,
        pending_reason=pending_text(["a-0: every GPU is full.", "b-0: every GPU is full."]),
    )  # fmt: skip
    figures.changed(project.pk)
    page = client.get(url).content.decode()
    assert 'id="cpu-ram-wait"' in page
    assert "8000 of 8000 m used" in page
    assert "ReplicaSet/web-5f</strong>: Requested 4 CPU" in page
    assert reverse("project_status", args=[project.pk]) + "#cluster-pods" in page
    assert "<li><small>a-0: every GPU is full.</small></li>" in page
    assert "<li><small>b-0: every GPU is full.</small></li>" in page


def test_pending_text_keeps_within_its_column_and_counts_the_rest():
    lines = [f"pod-{i}: " + "word " * 30 for i in range(20)]
    text = pending_text(lines)
    assert len(text) <= 500
    assert text.startswith("pod-0: word")
    assert text.endswith("more waiting: see the live status page.")
    assert pending_text(["a: x", "b: y"]) == "a: x\nb: y"


def test_revoke_shows_what_happens_before_it_revokes(world, client_of):
    client = client_of(world.member)
    page = client.get(reverse("revoke_credentials")).content.decode()
    assert 'id="revoke-consequences"' in page
    assert "every kubeconfig you downloaded" in page
    assert 'class="danger" id="confirm-revoke"' in page
    access = client.get(reverse("cluster_access")).content.decode()
    assert 'class="button danger"' in access
