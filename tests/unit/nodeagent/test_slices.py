"""ResourceSlice rendering: one shareable device per GPU whose capacity policy admits exactly
the sellable sizes."""

from __future__ import annotations

from dataclasses import replace

from nodeagent.slices import render_resource_slice, spec_digest
from tests.helpers.gpus import NODE


def test_one_shareable_device_per_gpu(gpus):
    s = render_resource_slice(NODE, gpus, generation=3)
    spec = s["spec"]
    assert spec["driver"] == "gpu.tranche.dev"
    assert spec["pool"] == {"name": NODE, "generation": 3, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    dev = spec["devices"][0]
    assert dev["allowMultipleAllocations"] is True
    assert dev["attributes"]["productName"] == {"string": "Tesla V100-PCIE-32GB"}
    assert dev["attributes"]["cudaComputeCapability"] == {"version": "7.0.0"}
    assert dev["attributes"]["driverVersion"] == {"version": "550.54.15"}
    assert dev["capacity"]["memory"]["value"] == "32768Mi"
    assert dev["capacity"]["memory"]["requestPolicy"]["validValues"] == ["8Gi", "16Gi", "32Gi"]
    assert dev["capacity"]["cores"]["requestPolicy"] == {
        "default": "25",
        "validValues": ["25", "50", "100"],
    }


def test_render_is_pure_and_order_independent(gpus):
    assert render_resource_slice(NODE, gpus, 1) == render_resource_slice(NODE, gpus[::-1], 1)


def test_unknown_model_sells_quarters_halves_and_whole(gpus):
    odd = replace(gpus[0], name="NVIDIA A10", memory_bytes=24 * 1024**3)
    dev = render_resource_slice(NODE, [odd], 1)["spec"]["devices"][0]
    assert dev["capacity"]["memory"]["requestPolicy"]["validValues"] == ["6Gi", "12Gi", "24Gi"]


def test_slice_is_owned_by_its_node_and_digest_ignores_generation(gpus):
    owned = render_resource_slice(NODE, gpus, 1, node_uid="0f0e-uid")
    assert owned["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "0f0e-uid", "controller": True}
    ]
    assert "ownerReferences" not in render_resource_slice(NODE, gpus, 1)["metadata"]
    assert spec_digest(owned) == spec_digest(render_resource_slice(NODE, gpus, 7, "0f0e-uid"))
    assert spec_digest(owned) != spec_digest(render_resource_slice(NODE, gpus[:3], 1, "0f0e-uid"))
