"""Test tiers: each folder under tests/ is one marker, applied here so no test forgets it.

`gpu` tests are skipped (with the reason shown by -ra) where no NVIDIA GPU is present.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

# The control plane fixture (`kube_cluster`) and its build-before-tests hook, for every tier.
pytest_plugins = ["tests.helpers.cluster", "tests.helpers.realnode"]

TIERS = ("unit", "integration", "cluster", "browser", "native", "gpu", "images", "install", "bench")
TESTS_DIR = Path(__file__).parent


def _tier_of(path: Path) -> str | None:
    try:
        first = path.relative_to(TESTS_DIR).parts[0]
    except (ValueError, IndexError):
        return None
    return first if first in TIERS else None


def _has_real_gpu() -> bool:
    return Path("/dev/nvidia0").exists() and shutil.which("nvidia-smi") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    no_gpu = pytest.mark.skip(reason="no NVIDIA GPU on this machine (/dev/nvidia0 absent)")
    for item in items:
        tier = _tier_of(Path(str(item.fspath)))
        if tier:
            item.add_marker(getattr(pytest.mark, tier))
        if item.get_closest_marker("gpu") and not _has_real_gpu():
            item.add_marker(no_gpu)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix) -> None:
    """Test database settings for every tier.

    Consumers and live servers touch the database from worker threads; persistent connections
    there outlive the test and block dropping the test database, so tests never keep them.
    TRANCHE_TEST_DB_NAME lets two runs share one PostgreSQL without dropping each other's database.
    """
    import os

    from django.db import connections

    connections["default"].settings_dict["CONN_MAX_AGE"] = 0
    name = os.environ.get("TRANCHE_TEST_DB_NAME")
    if name:
        connections["default"].settings_dict.setdefault("TEST", {})["NAME"] = name


TEST_QUEUE = "tranche-test"


@pytest.fixture(autouse=True)
def _tests_never_feed_the_demo_queue(request: pytest.FixtureRequest) -> None:
    """Orders placed in tests send reconcile hints; they go to a test queue, never to the
    queue a running `make run` worker consumes (same Redis), where they would name projects
    of the test database. Fixtures that run a real worker pick their own queue after this."""
    if "django_db_setup" not in request.fixturenames and "settings" not in request.fixturenames:
        return
    settings = request.getfixturevalue("settings")
    settings.CELERY_TASK_DEFAULT_QUEUE = TEST_QUEUE
    # Sign-up caps count in Redis, across tests and runs, all from 127.0.0.1; the tests of the
    # caps themselves lower them again (tests/integration/security/test_signup_limits.py).
    settings.SIGNUP_PER_ADDRESS_PER_HOUR = settings.SIGNUP_PER_HOUR = 1_000_000
