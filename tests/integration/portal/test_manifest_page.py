"""The manifest page tells tenants what the slice they bought does inside the container, with
the product's own figures, and what is refused there (so nobody spends an afternoon on it)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse


@pytest.mark.parametrize("device_class", ["tranche-v100-8g", "tranche-v100-16g"])
def test_inside_the_slice_uses_the_products_figures(world, client_of, device_class):
    product = world.products[device_class]
    page = client_of(world.member).get(reverse("manifest", args=[world.project_a.pk, product.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    section = re.search(r'<ul class="inside" id="inside-the-slice">(.*?)</ul>', html, re.S)
    assert section, "the inside-the-container section is missing"
    text = section.group(1)
    assert f"hard cap of {product.memory_gib_label}" in text
    assert f"{product.compute_percent}&nbsp;% share" in text
    assert "backend:cudaMallocAsync" in text
    assert "CUDA_ERROR_NOT_SUPPORTED" in text


def test_the_slice_check_is_shown_and_downloaded_alike(world, client_of):
    """The page documents the sample image's check Pod; the download is the same text."""
    import html as html_text

    import yaml

    product = world.products["tranche-v100-8g"]
    tenant = client_of(world.member)
    args = [world.project_a.pk, product.pk]
    page = tenant.get(reverse("manifest", args=args)).content.decode()
    shown = re.search(r'<code id="check-yaml">(.*?)</code>', page, re.S)
    assert shown, "the slice check is missing"
    download = tenant.get(reverse("manifest_check_download", args=args))
    assert download["Content-Type"] == "application/yaml; charset=utf-8"
    assert download.content.decode() == html_text.unescape(shown.group(1))
    (pod,) = yaml.safe_load_all(download.content)
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "registry.tranche.dev/sample:1"
    assert container["env"] == [{"name": "SAMPLE_ALLOC_MIB", "value": "10240"}]
    assert pod["metadata"]["namespace"] == world.project_a.namespace
    assert pod["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": "tranche-v100-8g"}
    ]
    assert "Tesla V100-PCIE-32GB, 8192 MiB" in page
    outsider = client_of(world.outsider).get(reverse("manifest_check_download", args=args))
    assert outsider.status_code == 404
