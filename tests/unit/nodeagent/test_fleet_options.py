"""The fleet publisher's command line and node reading: what the lead's bench starts is what
the agent parses, and a node's annotation and label decide its simulated GPUs."""

from __future__ import annotations

from pathlib import Path

from deploy.devcluster.nodes import fake_node_manifest
from deploy.local.agents import fleet_argv
from nodeagent.__main__ import FleetOptions, parse
from nodeagent.sim.fleet import fleet_node
from nodeagent.sim.gpus import sim_uuid

A100 = "NVIDIA A100-SXM4-40GB"


def test_fleet_argv_parses_to_the_fleet_options():
    argv = fleet_argv(Path("/k/config"), "bench 1", interval=5, gpus_per_node=4)
    assert argv[1:4] == ["-m", "nodeagent", "fleet"]
    assert parse(argv[3:]) == FleetOptions(
        selector="tranche.dev/fleet=bench-1",
        kubeconfig=Path("/k/config"),
        model="Tesla V100-PCIE-32GB",
        gpus_per_node=4,
        interval=5.0,
    )


def test_a_fleet_node_is_simulated_as_its_annotation_and_label_say():
    item = fake_node_manifest("f-a-0", A100, 8, fleet="f")
    item["metadata"]["uid"] = "uid-1"
    assert item["metadata"]["labels"]["tranche.dev/fleet"] == "f"
    node = fleet_node(item, "Tesla V100-PCIE-32GB", 2)
    assert (node.name, node.uid, len(node.gpus)) == ("f-a-0", "uid-1", 8)
    assert {g.name for g in node.gpus} == {A100}
    assert [g.uuid for g in node.gpus] == [sim_uuid("f-a-0", i) for i in range(8)]
    assert node.gpus[0].memory_bytes == 40 * 1024**3

    bare = {"metadata": {"name": "plain", "uid": "uid-2", "labels": {}}}
    node = fleet_node(bare, "Tesla V100-PCIE-32GB", 2)
    assert [g.name for g in node.gpus] == ["Tesla V100-PCIE-32GB"] * 2
