"""Issue #14 item 1: invitations are hashed, bound to the invited address, expire, and their
token never appears in a URL a server sees (so never in an access log)."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from portal.tenants.models import Invitation, Membership


def _invite(world, client_of, email: str) -> tuple[str, str]:
    response = client_of(world.owner).post(
        reverse("organization", args=[world.org_a.pk]),
        {"form": "invite", "email": email, "role": "owner"},
    )
    assert response.status_code == 200
    path, token = response.context["invite_link"].split("testserver", 1)[1].split("#")
    return path, token


def test_invitation_token_is_stored_hashed_outside_the_url_and_expires_in_7_days(world, client_of):
    path, token = _invite(world, client_of, "new@example.test")
    assert len(token) >= 40
    assert token not in path  # the server only ever sees the path, never the fragment
    row = Invitation.objects.get()
    stored = [str(getattr(row, f.attname)) for f in Invitation._meta.concrete_fields]
    assert not any(token in value for value in stored), "the plaintext token is stored"
    assert timedelta(days=6, hours=23) < row.expires_at - timezone.now() <= timedelta(days=7)


def test_only_the_invited_address_can_accept(world, client_of, client):
    path, token = _invite(world, client_of, world.member.email)
    client_of(world.outsider)  # holds the link but is not the invited address
    assert client.post(path, {"token": token}).status_code == 302
    response = client.post(path, {"join": "1"})
    assert response.status_code == 403
    assert f"This invitation is for {world.member.email}" in response.content.decode()
    assert not Membership.objects.filter(user=world.outsider, organization=world.org_a).exists()
    client_of(world.member)
    assert client.post(path, {"token": token}).status_code == 302
    assert client.post(path, {"join": "1"}).status_code == 302
    assert Membership.objects.get(user=world.member, organization=world.org_a).role == "member"


def test_an_expired_invitation_is_refused(world, client_of, client):
    path, token = _invite(world, client_of, world.outsider.email)
    Invitation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    client_of(world.outsider)
    response = client.post(path, {"token": token})
    assert response.status_code == 404
    assert not Membership.objects.filter(user=world.outsider, organization=world.org_a).exists()


def test_support_cannot_filter_invitations_by_their_secret(world, client_of, support):
    _invite(world, client_of, "new@example.test")
    url = reverse("admin:tenants_invitation_changelist")
    staff = client_of(support)
    staff.raise_request_exception = False  # a refused lookup is a 400 page, not an error
    assert staff.get(url).status_code == 200
    for lookup in ("token_hash__regex", "token_hash__startswith", "token__regex"):
        response = staff.get(url, {lookup: "^"})
        assert response.status_code != 200, lookup
