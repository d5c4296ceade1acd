"""Golden files pin every renderer's exact output; the claim template matches the portal's.

Regenerate after an intended change with `TRANCHE_UPDATE_GOLDEN=1 pytest tests/unit/controller`
and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from controller.render.bundle import render_platform, render_project
from controller.render.claim_template import render_claim_template
from controller.render.quota import render_resource_quota
from controller.render.spec import Entitlement, PlanLimits, ProductSpec, ProjectSpec

GOLDEN = Path(__file__).parent / "golden"
V100 = "Tesla V100-PCIE-32GB"
PRODUCTS = tuple(
    ProductSpec(f"tranche-v100-{gib}g", V100, gib * 1024, pct)
    for gib, pct in ((8, 25), (16, 50), (32, 100))
)


def _spec(quantity: int = 2) -> ProjectSpec:
    return ProjectSpec(
        project_id=7,
        namespace="t-acme-ml-0a1b2c",
        organization="acme",
        project="ml",
        entitlements=(Entitlement(PRODUCTS[0], quantity),),
        limits=PlanLimits(),
        all_products=PRODUCTS,
    )


def _check(name: str, docs: list[dict]) -> None:
    path = GOLDEN / f"{name}.yaml"
    text = yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False, width=100)
    if os.environ.get("TRANCHE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with TRANCHE_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{name} differs from {path}; if intended, regenerate"


def test_project_objects_match_golden() -> None:
    _check("project_buy_2x8g", render_project(_spec()))


def test_platform_objects_match_golden() -> None:
    _check("platform", render_platform(PRODUCTS))


def test_quota_counts_bought_slices_and_zeroes_the_rest() -> None:
    hard = render_resource_quota(_spec())["spec"]["hard"]
    assert hard["tranche-v100-8g.deviceclass.resource.k8s.io/devices"] == "2"
    assert hard["tranche-v100-16g.deviceclass.resource.k8s.io/devices"] == "0"
    assert hard["tranche-v100-32g.deviceclass.resource.k8s.io/devices"] == "0"


def test_cancelled_product_keeps_template_only_during_grace() -> None:
    spec = _spec()
    grace = ProjectSpec(**{**spec.__dict__, "entitlements": (Entitlement(PRODUCTS[0], 0),)})
    gone = ProjectSpec(**{**spec.__dict__, "entitlements": (Entitlement(PRODUCTS[0], 0, False),)})
    kinds = [o["kind"] for o in render_project(grace)]
    assert "ResourceClaimTemplate" in kinds
    assert "ResourceClaimTemplate" not in [o["kind"] for o in render_project(gone)]
    cm = render_project(gone)[1]
    assert cm["data"] == {}


@pytest.mark.parametrize("product", PRODUCTS, ids=lambda p: p.device_class)
def test_template_equals_the_portal_manifest(product: ProductSpec) -> None:
    from portal.catalog import manifests
    from portal.catalog.seed import V100_PRODUCTS

    assert [f"tranche-v100-{g}g" for g, *_ in V100_PRODUCTS] == [p.device_class for p in PRODUCTS]
    spec = _spec()
    ref = manifests.ProjectRef(spec.namespace, spec.organization, spec.project)
    theirs = manifests.render_claim_template(
        ref,
        manifests.ProductSpec(product.device_class, product.memory_mib, product.compute_percent),
    )
    assert render_claim_template(spec, product) == theirs
