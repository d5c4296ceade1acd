"""The pre-flight page and JSON API: session or personal token, scoped, bounded, never a 500."""

from __future__ import annotations

import pytest
import yaml
from django.urls import reverse

from portal.catalog.manifests import ProjectRef, WorkloadSpec, render_sample_deployment
from portal.preflight.models import ApiToken
from portal.preflight.tokens import create_token

pytestmark = pytest.mark.usefixtures("no_cluster", "no_image_reads")


def sample_yaml(world, **workload) -> str:
    project = world.project_a
    ref = ProjectRef(project.namespace, project.organization.slug, project.slug)
    spec = world.products["tranche-v100-8g"].spec()
    return yaml.safe_dump(render_sample_deployment(ref, spec, WorkloadSpec(**workload)))


def api(client, project, body, token=None, content_type="application/yaml"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    url = reverse("preflight_api", args=[project.pk])
    return client.post(url, data=body, content_type=content_type, **headers)


def test_token_api_returns_the_verdicts_as_json(world, client) -> None:
    _token, secret = create_token(world.member, "ci")
    resp = api(client, world.project_a, sample_yaml(world, image="ollama/ollama"), secret)
    assert resp.status_code == 200
    body = resp.json()
    assert body["overall"] == "warning"
    checks = {v["check"]: v for v in body["verdicts"]}
    assert checks["image_tag"]["level"] == "warning"
    assert "not pinned" in checks["image_tag"]["reason"]
    assert checks["cluster"]["reason"].startswith("Admission, quota and capacity were not checked")


def test_tokens_are_stored_hashed_and_a_revoked_token_is_refused(world, client) -> None:
    token, secret = create_token(world.member, "laptop")
    stored = ApiToken.objects.get(pk=token.pk)
    assert secret not in (stored.token_hash, stored.prefix)
    assert len(stored.token_hash) == 64
    client.force_login(world.member)
    client.post(reverse("revoke_api_token", args=[token.pk]))
    client.logout()
    resp = api(client, world.project_a, sample_yaml(world), secret)
    assert resp.status_code == 401
    assert "personal API token" in resp.json()["error"]


def test_another_organizations_project_is_404(world, client) -> None:
    _token, secret = create_token(world.outsider, "x")
    assert api(client, world.project_a, sample_yaml(world), secret).status_code == 404
    client.force_login(world.outsider)
    assert client.get(reverse("preflight", args=[world.project_a.pk])).status_code == 404


def test_one_user_cannot_revoke_anothers_token(world, client) -> None:
    token, secret = create_token(world.member, "ci")
    client.force_login(world.outsider)
    client.post(reverse("revoke_api_token", args=[token.pk]))
    client.logout()
    assert api(client, world.project_a, sample_yaml(world), secret).status_code == 200


def test_session_api_needs_csrf(world) -> None:
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(world.member)
    assert api(strict, world.project_a, sample_yaml(world)).status_code == 403


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ("kind: [", 200, "not valid YAML at the end of line 1"),
        ("a: " + "b" * (5 * 1024 * 1024), 413, "larger than 1 MiB"),
        ('{"manifest": 3', 400, "JSON body must be an object"),
        ('{"a": ' * 3000 + "1" + "}" * 3000, 400, "nested too deeply"),  # #45
        ("{" * 3000, 400, "JSON body must be an object"),  # #45: 3,000 bare braces
    ],
)
def test_bad_input_is_a_clear_verdict_never_a_500(world, client, body, status, words) -> None:
    _token, secret = create_token(world.member, "ci")
    content_type = "application/json" if body.startswith("{") else "application/yaml"
    resp = api(client, world.project_a, body, secret, content_type)
    assert resp.status_code == status
    assert words in resp.content.decode()


def test_page_runs_the_generated_manifest_and_links_fixes(world, client) -> None:
    client.force_login(world.member)
    manifest_page = client.get(
        reverse("manifest", args=[world.project_a.pk, world.products["tranche-v100-8g"].pk])
    )
    assert b"Check before you apply" in manifest_page.content
    resp = client.post(
        reverse("preflight", args=[world.project_a.pk]), {"manifest": sample_yaml(world)}
    )
    assert resp.status_code == 200
    html = resp.content.decode()
    assert 'data-check="image_tag" data-level="ok"' in html
    assert 'data-check="context_length" data-level="ok"' not in html  # no model named: no figure


def test_page_refuses_5mb_paste_with_a_verdict(world, client, settings) -> None:
    client.force_login(world.member)
    resp = client.post(
        reverse("preflight", args=[world.project_a.pk]), {"manifest": "x" * (5 * 1024 * 1024)}
    )
    assert resp.status_code == 200
    assert "larger than 1 MiB" in resp.content.decode()


def test_account_page_creates_a_token_shown_once(world, client) -> None:
    client.force_login(world.member)
    resp = client.post(reverse("api_tokens"), {"name": "ci"})
    secret = resp.context["secret"]
    assert secret.startswith("trp_")
    again = client.get(reverse("api_tokens"))
    assert secret not in again.content.decode()
    assert ApiToken.objects.get(user=world.member).prefix == secret[:12]


def test_the_api_and_the_page_give_the_same_verdicts(world, client) -> None:
    text = sample_yaml(world, image="ollama/ollama", ram_limit="512Mi")
    _token, secret = create_token(world.member, "ci")
    from_api = api(client, world.project_a, text, secret).json()
    client.force_login(world.member)
    page = client.post(reverse("preflight", args=[world.project_a.pk]), {"manifest": text})
    assert page.context["report"].as_json() == from_api
    assert {v["check"] for v in from_api["verdicts"]} >= {"cluster", "image_tag", "model_volume"}


def test_over_the_limit_a_call_is_told_when_to_try_again(world, client, settings) -> None:
    from portal.preflight import limits

    settings.PREFLIGHT_USER_CONCURRENCY = 1
    _token, secret = create_token(world.member, "ci")
    held = limits.acquire(world.member.pk, world.project_a.organization_id, 60)
    try:
        resp = api(client, world.project_a, sample_yaml(world), secret)
    finally:
        limits.release(held)
    assert resp.status_code == 429
    assert resp["Retry-After"] == str(resp.json()["retry_after_s"])
    assert "you already have 1 pre-flight checks running" in resp.json()["error"]
    assert f"Try again in {resp.json()['retry_after_s']} s." in resp.json()["error"]
    assert api(client, world.project_a, sample_yaml(world), secret).status_code == 200
