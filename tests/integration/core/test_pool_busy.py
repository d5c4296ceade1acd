"""A busy pool is not an outage (issue #28's 50 parallel pre-flight calls were told "Tranche
cannot reach the database" while PostgreSQL answered: every connection of the portal's pool was
in use). On the project's real PostgreSQL: a pool whose every connection is taken raises
`PoolBusy` and does not mark the database down; the page says busy, the API answers JSON; a
pool that cannot connect at all is still the database outage."""

from __future__ import annotations

import json

import psycopg
import pytest
from django.db import OperationalError, connection
from django.test import RequestFactory
from psycopg_pool import ConnectionPool

from portal.core.dbbackend.base import DatabaseGate, PoolBusy
from portal.core.outage import BUSY, OutageMiddleware, what_is_down
from tests.helpers.portal import free_port

pytestmark = pytest.mark.django_db


def _conninfo(port: int | None = None) -> str:
    params = connection.get_connection_params()
    return (
        f"host={params['host']} port={port or params['port']} dbname={params['dbname']} "
        f"user={params['user']} password={params.get('password') or ''} connect_timeout=2"
    )


def _as_django_error(exc: BaseException) -> OperationalError:
    """What Django's wrap_database_errors raises for a psycopg OperationalError."""
    try:
        raise OperationalError(*exc.args) from exc
    except OperationalError as wrapped:
        return wrapped


def test_a_full_pool_is_busy_not_down():
    gate = DatabaseGate()
    with ConnectionPool(_conninfo(), min_size=1, max_size=1, timeout=0.2, open=True) as pool:
        pool.wait(timeout=5)
        held = gate.getconn(pool)  # the only connection, taken
        try:
            with pytest.raises(PoolBusy) as raised:
                gate.getconn(pool)
        finally:
            pool.putconn(held)
        assert gate.down_since is None, "a busy pool marked the database down"
        pool.putconn(gate.getconn(pool))  # and it serves again at once
    assert what_is_down(_as_django_error(raised.value)) == BUSY


def test_the_busy_answer_says_busy_and_the_api_gets_json():
    middleware = OutageMiddleware(lambda request: None)
    busy = _as_django_error(PoolBusy("all 20 database connections of this process in use"))
    page = middleware.process_exception(RequestFactory().get("/projects/1/quota/"), busy)
    assert page.status_code == 503
    assert page["Retry-After"] == "5"
    assert "Tranche is busy" in page.content.decode()
    assert "cannot reach" not in page.content.decode()
    api = middleware.process_exception(RequestFactory().post("/api/v1/projects/1/preflight"), busy)
    body = json.loads(api.content)
    assert api.status_code == 503
    assert api["Content-Type"] == "application/json"
    assert body["retry_after_s"] == 5, body
    assert "busy" in body["error"], body


def test_a_pool_that_cannot_connect_is_still_the_database_outage():
    gate = DatabaseGate()
    nobody = free_port()  # nothing listens there: PostgreSQL "down"
    pool = ConnectionPool(_conninfo(nobody), min_size=0, max_size=2, timeout=0.3, open=True)
    with pool, pytest.raises(psycopg.OperationalError) as raised:
        gate.getconn(pool)
    assert not isinstance(raised.value, PoolBusy)
    assert gate.down_since is not None
    assert what_is_down(_as_django_error(raised.value)) == "the database"
    page = OutageMiddleware(lambda r: None).process_exception(
        RequestFactory().get("/"), _as_django_error(raised.value)
    )
    assert "cannot reach the database" in page.content.decode()
    assert page["Retry-After"] == "30"
