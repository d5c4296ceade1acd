"""GPU code vs GPU with real data: libcurand from PyPI wheels, in images on a real registry.

CUDA 12's libcurand carries sm_70 SASS; CUDA 13's (10.4) starts at sm_75. Packed into OCI
images and pushed to go-containerregistry on loopback, the CUDA 13 image must be flagged for the
V100 product and pass for the A100 one; the CUDA 12 image passes for both.
"""

from __future__ import annotations

import tarfile
import time
import zlib

import pytest

from portal.catalog.seed import ensure_a100_line, ensure_catalogue
from portal.preflight.models import ImageScan
from portal.preflight.scanning import scan_image
from portal.preflight.service import run_preflight
from tests.helpers.factories import make_tenant
from tests.integration.preflight.hostile import silent_listener
from tests.integration.preflight.images import CACHE, push_image

pytestmark = pytest.mark.timeout(600)


def manifest(image: str, device_class: str) -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: llm}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: llm}}}}
  template:
    metadata: {{labels: {{app: llm}}}}
    spec:
      resourceClaims: [{{name: gpu, resourceClaimTemplateName: {device_class}}}]
      containers:
      - name: llm
        image: {image}
        resources: {{claims: [{{name: gpu}}]}}
"""


def gpu_code_verdict(user, project, image: str, device_class: str):
    report = run_preflight(user, project, manifest(image, device_class))
    [verdict] = [v for v in report.verdicts if v.check == "gpu_code"]
    return verdict


@pytest.mark.django_db(transaction=True)
def test_cuda13_image_is_flagged_for_v100_and_passes_for_a100(
    cuda_images, plain_http, no_cluster, in_worker
) -> None:
    ensure_catalogue()
    ensure_a100_line()
    user, _org, project = make_tenant("gpucode", "GPU code org")

    v100 = gpu_code_verdict(user, project, cuda_images["cu13"], "tranche-v100-8g")
    assert v100.level == "will_fail", v100
    assert "need sm_75 or newer; on a Tesla V100-PCIE-32GB" in v100.reason
    assert 70 not in v100.figures["sass"]
    assert v100.figures["gpu_files"] == 1

    a100 = gpu_code_verdict(user, project, cuda_images["cu13"], "tranche-a100-10g")
    assert a100.level == "ok", a100
    assert "sm_80" in a100.reason

    for device_class in ("tranche-v100-8g", "tranche-a100-10g"):
        verdict = gpu_code_verdict(user, project, cuda_images["cu12"], device_class)
        assert verdict.level == "ok", verdict
        assert 70 in verdict.figures["sass"]

    # Cached by the sha256 of the manifest: one scan per image, however often it is checked.
    assert ImageScan.objects.count() == 2
    scanned_at = sorted(ImageScan.objects.values_list("scanned_at", flat=True))
    again = gpu_code_verdict(user, project, cuda_images["cu13"], "tranche-v100-8g")
    assert again == v100
    assert sorted(ImageScan.objects.values_list("scanned_at", flat=True)) == scanned_at


def test_the_streaming_reader_finds_what_the_whole_file_reader_finds(cuda_images) -> None:
    from portal.preflight.fatbin import FatbinStream, gpu_code_of
    from tests.integration.preflight.images import cuda_library

    for flavour in ("cu12", "cu13"):
        data = cuda_library(flavour).read_bytes()
        stream = FatbinStream()
        for start in range(0, len(data), 1 << 20):
            stream.feed(data[start : start + (1 << 20)])
        assert stream.result() == gpu_code_of(data), flavour


@pytest.mark.django_db
def test_an_image_that_does_not_exist_is_a_clear_verdict(oci_registry, plain_http) -> None:
    found = scan_image(f"{oci_registry.host}/nobody/nothing:1.0")
    assert found.missing  # pre-flight's verdict: will fail to pull
    assert found.error == (
        f"The image {oci_registry.host}/nobody/nothing:1.0 does not exist in its registry."
    )


@pytest.mark.django_db
def test_a_registry_that_times_out_is_a_verdict_within_its_timeout(plain_http) -> None:
    plain_http.PREFLIGHT_REGISTRY_TIMEOUT_SECONDS = 1
    with silent_listener() as host:
        started = time.monotonic()
        found = scan_image(f"{host}/x/y:1")
        elapsed = time.monotonic() - started
    assert (
        found.error
        == f"The registry for {host}/x/y:1 could not be read: 127.0.0.1 did not answer within 1 s."
    )
    assert elapsed < 5


def bomb_layer(uncompressed: int) -> bytes:
    """One tar member of `uncompressed` zero bytes, gzip-compressed (about 1000:1), cached."""
    cached = CACHE / f"bomb-{uncompressed}.tar.gz"
    if cached.is_file():
        return cached.read_bytes()
    info = tarfile.TarInfo("usr/lib/libbomb.so")
    info.size = uncompressed
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [deflate.compress(info.tobuf(format=tarfile.GNU_FORMAT))]
    zeros = bytes(1 << 20)
    for _ in range(uncompressed >> 20):
        parts.append(deflate.compress(zeros))
    parts.append(deflate.compress(bytes(1024)))  # end-of-archive blocks
    parts.append(deflate.flush())
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(b"".join(parts))
    return cached.read_bytes()


@pytest.mark.django_db
def test_a_layer_bomb_stops_at_the_bound(oci_registry, plain_http) -> None:
    plain_http.PREFLIGHT_IMAGE_MAX_BYTES = 64 * 1024**2
    layer = bomb_layer(1024**3)
    image = push_image(oci_registry.host, "tranche-test/bomb", "1", [layer])
    found = scan_image(image)
    assert 1024**3 / len(layer) > 500  # the compression ratio that makes it a bomb
    assert found.error == ""
    assert found.bound_reached
    assert found.bytes_read <= 64 * 1024**2
    assert not ImageScan.objects.filter(
        digest=found.digest
    ).exists()  # a partial scan is not cached
