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
