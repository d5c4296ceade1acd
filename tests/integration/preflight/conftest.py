"""Fixtures for pre-flight: a real OCI registry on loopback and images built from PyPI wheels."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy import ociregistry
from deploy.local.celery_worker import worker_argv
from tests.helpers.celery_worker import stop_worker
from tests.helpers.wait import wait_for
from tests.integration.preflight.images import LIB_PATH, cuda_library, packed_layer, push_image


@pytest.fixture(scope="session")
def oci_registry(tmp_path_factory) -> Iterator[ociregistry.Registry]:
    registry = ociregistry.start(tmp_path_factory.mktemp("ociregistry"))
    yield registry
    registry.stop()


@pytest.fixture(scope="session")
def cuda_images(oci_registry) -> dict[str, str]:
    """`cu12` (libcurand with sm_70 SASS) and `cu13` (sm_75 and newer) images on the registry."""
    return {
        flavour: push_image(
            oci_registry.host,
            f"tranche-test/curand-{flavour}",
            "1.0",
            [packed_layer({LIB_PATH: cuda_library(flavour)})],
        )
        for flavour in ("cu12", "cu13")
    }


@pytest.fixture
def plain_http(settings, oci_registry):
    """Pre-flight reads the loopback registry over plain HTTP and may reach loopback (as the
    platform would configure for an internal registry)."""
    settings.PREFLIGHT_PLAIN_HTTP_REGISTRIES = ["127.0.0.1"]
    settings.PREFLIGHT_ALLOWED_REGISTRIES = ["127.0.0.1"]
    return settings


@pytest.fixture(autouse=True)
def own_limit_keys(settings):
    """Each test's limits and results under their own Redis keys (ids restart per test run)."""
    settings.PREFLIGHT_KEY_PREFIX = f"test-preflight-{secrets.token_hex(4)}"
    return settings


WORKER_ENV = {
    "TRANCHE_PREFLIGHT_PLAIN_HTTP_REGISTRIES": "127.0.0.1",
    "TRANCHE_PREFLIGHT_ALLOWED_REGISTRIES": "127.0.0.1",
    "TRANCHE_PREFLIGHT_IMAGE_DEADLINE": "60",
    "TRANCHE_PREFLIGHT_REGISTRY_TIMEOUT": "30",
}


@pytest.fixture(scope="session")
def preflight_worker(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[str]:
    """A real Celery worker (threads pool, as `make run` starts it) on a private queue and the
    test database, with the loopback registries allow-listed; yields the queue."""
    from django.db import connection

    queue = f"preflight-test-{secrets.token_hex(3)}"
    log = tmp_path_factory.mktemp("preflight-worker") / "worker.log"
    env = {
        **os.environ, **WORKER_ENV, "TRANCHE_DEBUG": "1",
        "TRANCHE_DB_NAME": connection.settings_dict["NAME"],
        "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
    }  # fmt: skip
    cmd = worker_argv(queue, name=f"{queue}@localhost", concurrency=8, pool="threads")
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_for(lambda: b"ready." in log.read_bytes(), 60, "the pre-flight worker to start")
        yield queue
    finally:
        stop_worker(proc)


@pytest.fixture
def in_worker(settings, preflight_worker):
    """Scans go to the test's pre-flight worker; its results come back on this test's keys."""
    settings.PREFLIGHT_QUEUE = preflight_worker
    return settings


@pytest.fixture
def no_cluster(settings, tmp_path):
    """Integration tier: no control plane; the cluster checks must say 'not checked'."""
    settings.CONTROLLER_KUBECONFIG = str(tmp_path / "missing-kubeconfig")
    return settings


@pytest.fixture
def no_image_reads(settings):
    """Tests of other checks never fetch public images (a networked machine would pull GBs)."""
    settings.PREFLIGHT_SCAN_IMAGES = False
    return settings
