"""Sign-up, invitations, projects, suspension services and views."""

from __future__ import annotations

from django.urls import reverse

from portal.audit.models import AuditLog
from portal.tenants.models import Membership, Organization, Project
from portal.tenants.services import resume_organization, suspend_organization
from tranche.naming import DNS_LABEL


def test_sign_up_view_creates_user_org_project(db, client):
    response = client.post(
        reverse("signup"),
        {
            "username": "carol",
            "email": "carol@example.test",
            "password": "a-long-pass-42",
            "organization_name": "Carol & Co",
            "project_name": "LLM serving",
        },
    )
    assert response.status_code == 302
    project = Project.objects.get()
    assert project.organization.name == "Carol & Co"
    assert DNS_LABEL.match(project.namespace)
    assert project.namespace.startswith("t-carol-co-llm-serving-")
    assert Membership.objects.get().role == "owner"


def test_sign_up_rejects_bad_input(db, client):
    response = client.post(
        reverse("signup"),
        {
            "username": "x" * 300,
            "email": "nope",
            "password": "123",
            "organization_name": "o" * 81,
            "project_name": "",
        },
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert "Ensure this value has at most 150 characters" in body
    assert "Enter a valid email" in body
    assert not Organization.objects.exists()


def test_invite_then_accept(world, client_of, client):
    owner_client = client_of(world.owner)
    response = owner_client.post(
        reverse("organization", args=[world.org_a.pk]),
        {"form": "invite", "email": world.outsider.email, "role": "member"},
    )
    assert response.status_code == 200
    link = response.context["invite_link"]
    assert "/invite/" in link
    client_of(world.outsider)  # the invited outsider accepts: becomes a member of A
    path, token = link.split("testserver", 1)[1].split("#")
    assert client.post(path, {"token": token}).status_code == 302  # opens it
    assert client.post(path, {"join": "1"}).status_code == 302
    assert Membership.objects.filter(user=world.outsider, organization=world.org_a).exists()
    assert client.post(path, {"token": token}).status_code == 404  # used once


def test_member_cannot_invite(world, client_of):
    response = client_of(world.member).post(
        reverse("organization", args=[world.org_a.pk]),
        {"form": "invite", "email": "x@example.test", "role": "owner"},
    )
    assert response.status_code == 403
    assert "Only owners can invite" in response.content.decode()


def test_create_project_and_switch(world, client_of):
    client = client_of(world.member)
    response = client.post(
        reverse("organization", args=[world.org_a.pk]), {"form": "project", "name": "Batch"}
    )
    assert response.status_code == 302
    batch = Project.objects.get(name="Batch")
    assert (
        client.post(reverse("switch_project"), {"project": world.project_a.pk}).status_code == 302
    )
    assert client.get(reverse("home"))["Location"] == reverse("quota", args=[world.project_a.pk])
    assert batch.namespace != world.project_a.namespace


def test_suspend_resume_are_cas_and_audited(world):
    assert suspend_organization(actor=world.owner, organization_id=world.org_a.pk, reason="r")
    assert not suspend_organization(actor=world.owner, organization_id=world.org_a.pk, reason="r")
    assert resume_organization(actor=None, organization_id=world.org_a.pk)
    assert not resume_organization(actor=None, organization_id=world.org_a.pk)
    assert list(AuditLog.objects.order_by("id").values_list("action", flat=True)) == [
        "organization.suspend",
        "organization.resume",
    ]
