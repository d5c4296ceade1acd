"""Golden files pin every renderer's exact output; the project applies the page's template.

Regenerate after an intended change with `TRANCHE_UPDATE_GOLDEN=1 pytest tests/unit/controller`
and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from controller.render.bundle import render_platform, render_project
from controller.render.quota import render_resource_quota
from controller.render.spec import Entitlement, PlanLimits, ProjectSpec
from tranche.names import device_class_name
from tranche.products import ProductSpec

GOLDEN = Path(__file__).parent / "golden"
V100 = "Tesla V100-PCIE-32GB"
PRODUCTS = tuple(
    ProductSpec(
        device_class=f"tranche-v100-{gib}g",
        gpu_name=V100,
        memory_mib=gib * 1024,
        compute_percent=pct,
    )
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
        ingress_namespaces=("ingress-nginx",),
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


def test_catalogue_names_are_the_device_class_names() -> None:
    from portal.catalog.seed import V100_PRODUCTS

    assert [device_class_name("v100", g) for g, *_ in V100_PRODUCTS] == [
        p.device_class for p in PRODUCTS
    ]


@pytest.mark.parametrize("product", PRODUCTS, ids=lambda p: p.device_class)
def test_project_applies_the_template_the_manifest_page_shows(product: ProductSpec) -> None:
    """The page renders from the portal's ProjectRef, the controller from its ProjectSpec (with
    the entitlement, quota and policies around it): the template object must be the same."""
    from portal.catalog import manifests

    spec = ProjectSpec(**{**_spec().__dict__, "entitlements": (Entitlement(product, 1),)})
    ref = manifests.ProjectRef(spec.namespace, spec.organization, spec.project)
    shown = manifests.render_claim_template(ref, product)
    applied = [o for o in render_project(spec) if o["kind"] == "ResourceClaimTemplate"]
    assert applied == [shown]
    entitlements = next(o for o in render_project(spec) if o["kind"] == "ConfigMap")["data"]
    requested = shown["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]
    assert entitlements == {f"{product.device_class}.{k}": v for k, v in requested.items()}
