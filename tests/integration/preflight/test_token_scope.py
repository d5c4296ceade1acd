"""Issue #28, finding 9 (tokens): a personal API token works for one organization's projects
only, with the pre-flight scope, until it expires (90 days unless chosen otherwise) or its user
leaves that organization; the page that shows a new secret is never cached."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.preflight.models import ApiToken
from portal.preflight.tokens import create_token
from portal.tenants.models import Membership

pytestmark = pytest.mark.usefixtures("no_cluster", "no_image_reads")
MANIFEST = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"


def _api(client, project, secret):
    url = reverse("preflight_api", args=[project.pk])
    return client.post(url, data=MANIFEST, content_type="application/yaml",
                       HTTP_AUTHORIZATION=f"Bearer {secret}")  # fmt: skip


def test_a_token_covers_one_organization_and_expires(world, client) -> None:
    # the member of A is also a member of B: a token made for B must not reach A's projects
    Membership.objects.create(user=world.member, organization=world.org_b, role="member")
    for_b, secret_b = create_token(world.member, "b only", world.org_b.pk)
    for_a, secret_a = create_token(world.member, "a only", world.org_a.pk)
    assert _api(client, world.project_b, secret_b).status_code == 200
    assert _api(client, world.project_a, secret_b).status_code == 404
    assert _api(client, world.project_a, secret_a).status_code == 200
    assert for_a.scope == ApiToken.Scope.PREFLIGHT
    life = for_a.expires_at - timezone.now()
    assert timedelta(days=89, hours=23) < life <= timedelta(days=90)
    # expired: refused with what to do
    ApiToken.objects.filter(pk=for_a.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    refused = _api(client, world.project_a, secret_a)
    assert refused.status_code == 401
    assert "expired" in refused.json()["error"]
    assert "make a new one" in refused.json()["error"]
    # left the organization: B's token stops working
    Membership.objects.filter(user=world.member, organization=world.org_b).delete()
    assert _api(client, world.project_b, secret_b).status_code == 401
    # a token for an organization the user does not belong to is not made
    with pytest.raises(Exception, match="one of your organizations"):
        create_token(world.member, "x", world.org_b.pk)
    with pytest.raises(Exception, match="1 to 365 days"):
        create_token(world.member, "x", world.org_a.pk, days=3650)
    assert for_b.pk  # made while the member belonged to B


def test_the_token_page_is_never_cached_and_asks_for_organization_and_days(world, client) -> None:
    client.force_login(world.member)
    page = client.get(reverse("api_tokens"))
    assert page["Cache-Control"] == "no-store"
    html = page.content.decode()
    assert f'<option value="{world.org_a.pk}">' in html
    assert 'name="days"' in html
    assert 'value="90"' in html
    made = client.post(
        reverse("api_tokens"), {"name": "ci", "organization": world.org_a.pk, "days": 7}
    )
    assert made["Cache-Control"] == "no-store"
    assert made.context["secret"].startswith("trp_")
    token = ApiToken.objects.get(user=world.member)
    assert token.organization_id == world.org_a.pk
    assert token.expires_at - timezone.now() <= timedelta(days=7)
