"""/healthz and /readyz against the real PostgreSQL and Redis, and a Redis that is stopped."""

from __future__ import annotations

import json

import pytest

from tests.helpers.own_redis import OwnRedis

pytestmark = pytest.mark.django_db


def _asgi_get(path: str, method: str = "GET", cookie: bytes = b"") -> dict:
    """One request through the portal's real ASGI application (portal/asgi.py)."""
    from asgiref.sync import async_to_sync
    from channels.testing import HttpCommunicator

    from portal.asgi import application

    headers = [(b"host", b"testserver")] + ([(b"cookie", cookie)] if cookie else [])
    communicator = HttpCommunicator(application, method, path, headers=headers)
    return async_to_sync(communicator.get_response)()


def test_healthz_is_up_without_touching_the_database_or_the_session():
    from django.db import connection

    calls: list[str] = []

    def count(execute, sql, params, many, context):
        calls.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        resp = _asgi_get("/healthz", cookie=b"sessionid=not-a-session")
    assert resp["status"] == 200
    assert json.loads(resp["body"]) == {"status": "ok"}
    assert dict(resp["headers"])[b"cache-control"].startswith(b"max-age=0, no-cache")
    assert calls == [], f"/healthz ran {len(calls)} queries"


def test_healthz_refuses_other_methods_and_other_paths_still_reach_django():
    resp = _asgi_get("/healthz", method="POST")
    assert resp["status"] == 405
    assert dict(resp["headers"])[b"allow"] == b"GET"
    resp = _asgi_get("/healthz/")  # not the probe's path: Django answers it
    assert resp["status"] == 404


def test_readyz_ready_with_real_services(client):
    resp = client.get("/readyz")
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["redis"]["ok"] is True


@pytest.fixture
def throwaway_redis(tmp_path):
    """A real Redis of the test's own, so stopping it does not disturb the shared one."""
    redis = OwnRedis(tmp_path)
    redis.start()
    yield redis.proc, redis.port
    redis.stop()


def test_readyz_reports_stopped_redis(client, settings, throwaway_redis):
    proc, port = throwaway_redis
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    assert client.get("/readyz").status_code == 200

    proc.terminate()
    proc.wait(timeout=10)
    resp = client.get("/readyz")
    assert resp.status_code == 503
    body = resp.json()
    assert body["checks"]["redis"]["ok"] is False
    assert body["checks"]["database"]["ok"] is True
    assert "Redis unreachable" in body["message"]
    assert str(port) in body["message"]


def test_static_files_are_served_by_the_app(client):
    """daphne serves no static files itself; the app must, or every page loses its styles."""
    resp = client.get("/static/portal.css")
    assert resp.status_code == 200
    assert b"{" in b"".join(resp.streaming_content)


def test_readyz_detail_only_for_loopback_and_staff(client, django_user_model):
    """Issue #28 item 9: /readyz named silent nodes (and what is down) to anyone. A caller off
    loopback gets the verdict alone; staff get the detail from anywhere."""
    remote = client.get("/readyz", REMOTE_ADDR="203.0.113.7")
    assert remote.status_code in (200, 503)
    assert set(remote.json()) == {"status"}
    staff = django_user_model.objects.create_user("ops", password="x-Pass-1234567", is_staff=True)
    client.force_login(staff)
    seen = client.get("/readyz", REMOTE_ADDR="203.0.113.7").json()
    assert {"status", "checks"} <= set(seen)
    assert client.get("/readyz").json()["checks"]["database"]["ok"] is True  # loopback
