"""/metrics exports the readiness outcome (issue #30: "shown on the support console and as a
metric/alert"): the verdict of each /readyz scope and each check, from the real PostgreSQL and a
Redis of the test's own that is then stopped; only the host, staff or the bearer token read it."""

from __future__ import annotations

import re

import pytest

from tests.helpers.own_redis import OwnRedis

pytestmark = pytest.mark.django_db


def _gauges(text: str) -> dict[str, float]:
    """'name{labels}' -> value of every sample line."""
    return {m[1]: float(m[2]) for m in re.finditer(r"^(\S+\{[^}]*\}|\S+) (\S+)$", text, re.M)}


def test_metrics_follow_readiness_as_redis_stops(client, settings, tmp_path):
    redis = OwnRedis(tmp_path)
    redis.start()
    settings.REDIS_URL = redis.url
    try:
        resp = client.get("/metrics")
        assert resp.status_code == 200, resp.content
        before = _gauges(resp.content.decode())
        assert before['tranche_ready{scope="portal"}'] == 1.0
        assert before['tranche_readiness_check_ok{check="database"}'] == 1.0
        assert before['tranche_readiness_check_ok{check="redis"}'] == 1.0
        # The controller scope is there whatever the cluster says; it agrees with /readyz.
        controller = client.get("/readyz?scope=controller").status_code == 200
        assert before['tranche_ready{scope="controller"}'] == float(controller)
        redis.stop()
        after = _gauges(client.get("/metrics").content.decode())
    finally:
        redis.stop()
    assert after['tranche_ready{scope="portal"}'] == 0.0
    assert after['tranche_ready{scope="default"}'] == 0.0
    assert after['tranche_ready{scope="controller"}'] == 0.0
    assert after['tranche_readiness_check_ok{check="redis"}'] == 0.0
    assert after['tranche_readiness_check_ok{check="database"}'] == 1.0
    assert after["tranche_readiness_check_seconds"] < 1.0  # bounded like /readyz


ENDPOINTS = [("/metrics", b"tranche_ready{"), ("/metrics/business", b"tranche_orders{")]


@pytest.mark.parametrize(("path", "family"), ENDPOINTS)
def test_metrics_only_for_the_host_staff_or_the_token(client, settings, path, family):
    remote = {"REMOTE_ADDR": "203.0.113.7"}
    refused = client.get(path, **remote)
    assert refused.status_code == 403
    assert b"TRANCHE_METRICS_TOKEN" in refused.content
    settings.METRICS_TOKEN = "s3cret-scrape"
    wrong = client.get(path, HTTP_AUTHORIZATION="Bearer nope", **remote)
    assert wrong.status_code == 403
    right = client.get(path, HTTP_AUTHORIZATION="Bearer s3cret-scrape", **remote)
    assert right.status_code == 200
    assert family in right.content
