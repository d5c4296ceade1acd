"""A bench beside a running stack leaves the stack's databases and Redis keys alone
(`bench/scalekit/citizen.py`, used by bench/portal_modes.py): it creates uniquely named
databases and drops only those, and writes only to a Redis index that was empty."""

from __future__ import annotations

import secrets

import pytest
import redis
from django.conf import settings

from bench.scalekit import citizen

BENCH_INDEX = 12


def _databases() -> set[str]:
    conf = settings.DATABASES["default"]
    with citizen._admin(conf) as admin:
        return {row[0] for row in admin.execute("SELECT datname FROM pg_database")}


@pytest.fixture
def stack():
    """A running stack's database and Redis keys (its index, the configured one)."""
    conf = settings.DATABASES["default"]
    name = f"tranche_stack_{secrets.token_hex(3)}"
    with citizen._admin(conf) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    keys = redis.Redis.from_url(settings.REDIS_URL)
    key = f"tranche:pods:{secrets.token_hex(3)}"
    keys.set(key, "the stack's bindings")
    yield name, key
    keys.delete(key)
    with citizen._admin(conf) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def bench_url():
    url = citizen.bench_redis_url(settings.REDIS_URL, BENCH_INDEX)
    redis.Redis.from_url(url).flushdb()  # this test's own index
    yield url
    redis.Redis.from_url(url).flushdb()


def test_a_bench_run_leaves_the_stacks_databases_and_keys(stack, bench_url):
    stack_db, stack_key = stack
    assert bench_url != settings.REDIS_URL
    databases = citizen.BenchDatabases(settings.DATABASES["default"])
    citizen.claim_redis(bench_url)
    mine = databases.create(citizen.unique_name("tranche_modes_after"))
    redis.Redis.from_url(bench_url).set("tranche:pods:1", "the bench's bindings")
    assert {mine, stack_db} <= _databases()

    databases.drop_all()
    citizen.release_redis(bench_url)

    assert stack_db in _databases()
    assert mine not in _databases()
    assert redis.Redis.from_url(settings.REDIS_URL).get(stack_key) == b"the stack's bindings"
    assert redis.Redis.from_url(bench_url).dbsize() == 0


def test_a_bench_refuses_a_redis_index_that_holds_keys(bench_url):
    live = redis.Redis.from_url(bench_url)
    live.set("tranche:pods:7", "a stack's bindings")
    with pytest.raises(citizen.BenchRefused, match="holds 1 keys"):
        citizen.claim_redis(bench_url)
    assert live.get("tranche:pods:7") == b"a stack's bindings"


def test_a_bench_refuses_a_database_name_it_did_not_create(stack):
    stack_db, _key = stack
    databases = citizen.BenchDatabases(settings.DATABASES["default"])
    with pytest.raises(citizen.BenchRefused, match="exists"):
        databases.create(stack_db)
    databases.drop_all()
    assert stack_db in _databases()
