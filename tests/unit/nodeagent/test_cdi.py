"""The CDI spec a prepared claim gets validates against the upstream CDI schema and carries
every edit the core needs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry
from referencing.jsonschema import DRAFT7

from nodeagent import agent, cdi

FIXTURES = Path(__file__).parents[2] / "fixtures" / "cdi"
FILES = cdi.ClaimFiles(
    core_library="/opt/tranche/libtranche.so",
    preload_file="/var/lib/tranche/ld.so.preload",
    config_file="/var/lib/tranche/claims/u1/slice.conf",
    region_dir="/var/lib/tranche/regions/u1",
)
# CDI's parser rules for names (pkg/parser): vendor and class, and device names.
KIND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9]/[A-Za-z0-9][A-Za-z0-9_.-]*$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*[A-Za-z0-9]$|^[A-Za-z0-9]$")


def _validator(part: str | None = None) -> jsonschema.Draft7Validator:
    """The whole-spec validator, or (part="containerEdits") the definition of one part: the
    v0.8.1 schema does not descend into the spec-level containerEdits, so we check them too."""
    schema = json.loads((FIXTURES / "schema.json").read_text())
    defs = json.loads((FIXTURES / "defs.json").read_text())
    registry = Registry().with_resource("defs.json", DRAFT7.create_resource(defs))
    if part:
        schema = {"$ref": f"defs.json#/definitions/{part}"}
    return jsonschema.Draft7Validator(schema, registry=registry)


@pytest.mark.parametrize("minor", [None, 2])
def test_spec_validates_against_the_cdi_schema(minor):
    spec = cdi.render_cdi_spec("u1", [cdi.CdiDevice("u1-gpu-2", "GPU-2", minor)], FILES)
    _validator().validate(spec)
    _validator("containerEdits").validate(spec["containerEdits"])
    assert spec["cdiVersion"] == "1.1.0"
    assert KIND_RE.match(spec["kind"])
    assert all(NAME_RE.match(d["name"]) for d in spec["devices"])


def test_schema_rejects_a_broken_spec():
    spec = cdi.render_cdi_spec("u1", [cdi.CdiDevice("u1-gpu-2", "GPU-2", None)], FILES)
    del spec["containerEdits"]["mounts"][0]["containerPath"]
    with pytest.raises(jsonschema.ValidationError, match="containerPath"):
        _validator("containerEdits").validate(spec["containerEdits"])
    del spec["devices"][0]["containerEdits"]
    with pytest.raises(jsonschema.ValidationError, match="containerEdits"):
        _validator().validate(spec)


def test_edits_preload_the_core_and_mount_config_readonly():
    spec = cdi.render_cdi_spec("u1", [cdi.CdiDevice("u1-gpu-2", "GPU-2", 2)], FILES)
    mounts = {m["containerPath"]: m for m in spec["containerEdits"]["mounts"]}
    assert mounts["/etc/ld.so.preload"]["hostPath"] == FILES.preload_file
    assert "ro" in mounts["/etc/ld.so.preload"]["options"]
    assert "ro" in mounts[cdi.CONFIG_IN_CONTAINER]["options"]
    assert "ro" in mounts[cdi.CORE_IN_CONTAINER]["options"]
    assert "rw" in mounts[cdi.REGION_IN_CONTAINER]["options"]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia2"}]
    assert cdi.preload_line() == cdi.CORE_IN_CONTAINER + "\n"


def test_simulated_gpu_has_no_device_nodes():
    spec = cdi.render_cdi_spec("u1", [cdi.CdiDevice("u1-gpu-0", "GPU-0", None)], FILES)
    assert "deviceNodes" not in spec["containerEdits"]
    assert "deviceNodes" not in spec["devices"][0]["containerEdits"]


def test_the_core_finds_its_files_where_the_spec_mounts_them_and_nothing_in_the_env():
    """The shipped core reads the config and region only at fixed paths (no environment
    override, issue #13 item 1): the spec must mount them exactly there, and the library it
    mounts is the shipped one, never the test variant."""
    header = (Path(__file__).parents[3] / "nodeagent/native/src/config.h").read_text()
    fixed = dict(re.findall(r'#define (TR_DEFAULT_\w+) "([^"]+)"', header))
    assert fixed == {
        "TR_DEFAULT_CONFIG": cdi.CONFIG_IN_CONTAINER,
        "TR_DEFAULT_REGION_DIR": cdi.REGION_IN_CONTAINER,
    }
    spec = cdi.render_cdi_spec("u1", [cdi.CdiDevice("u1-gpu-2", "GPU-2", 2)], FILES)
    env = spec["containerEdits"]["env"]
    assert not [e for e in env if e.split("=")[0] in {"TRANCHE_SLICE_CONFIG", "TRANCHE_REGION_DIR"}]
    assert cdi.CORE_IN_CONTAINER.endswith("/libtranche.so")
    assert agent.CORE_LIB.name == "libtranche.so"


def test_on_a_real_node_the_simulated_driver_is_mounted_with_only_the_claims_gpus():
    sim = cdi.SimDriver("/sim", "/s/simgpu.conf", "/s/simgpu.state", "/s/claims/u1/dev")
    spec = cdi.render_cdi_spec("u1", [cdi.CdiDevice("u1-gpu-2", "GPU-2", None, 2)], FILES, sim)
    _validator().validate(spec)
    mounts = {m["containerPath"]: m for m in spec["containerEdits"]["mounts"]}
    assert mounts[cdi.SIM_DEVICE_DIR]["hostPath"] == sim.device_dir
    assert "ro" in mounts[cdi.SIM_DEVICE_DIR]["options"]
    assert mounts["/usr/lib/x86_64-linux-gnu/libcuda.so.1"]["hostPath"] == "/sim/libcuda.so.1"
    assert mounts[cdi.SIM_SMI]["hostPath"] == "/sim/nvidia-smi"
    assert f"SIMGPU_STATE={cdi.SIM_STATE}" in spec["containerEdits"]["env"]
    # The faults (XIDs, lost GPUs) are the node's: mounted read-only, at the path simgpu reads.
    assert mounts[cdi.SIM_FAULTS]["hostPath"] == "/s/simgpu.state.faults"
    assert "ro" in mounts[cdi.SIM_FAULTS]["options"]
    assert "rw" not in mounts[cdi.SIM_FAULTS]["options"]
    # simgpu's visibility folder is the one the C library reads.
    header = (Path(__file__).parents[3] / "nodeagent/native/simgpu/simstate.h").read_text()
    assert f'#define SIM_DEVICE_DIR "{cdi.SIM_DEVICE_DIR}"' in header
    suffix = cdi.SIM_FAULTS.removeprefix(cdi.SIM_STATE)
    assert f'#define SIM_FAULTS_SUFFIX "{suffix}"' in header
    without = cdi.render_cdi_spec("u1", [cdi.CdiDevice("u1-gpu-2", "GPU-2", None, 2)], FILES)
    assert cdi.SIM_DEVICE_DIR not in {
        m["containerPath"] for m in without["containerEdits"]["mounts"]
    }
