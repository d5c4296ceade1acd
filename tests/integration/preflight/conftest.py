"""Fixtures for pre-flight: a real OCI registry on loopback and images built from PyPI wheels."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deploy import ociregistry
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
    """Pre-flight reads the loopback registry over plain HTTP (as the platform would configure)."""
    settings.PREFLIGHT_PLAIN_HTTP_REGISTRIES = ["127.0.0.1"]
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
