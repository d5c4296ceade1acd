"""kubectl's three-way patch, computed from OpenAPI patch strategies (pure)."""

from __future__ import annotations

from portal.preflight.clientapply import kind_schema, three_way_patch

REF = "#/components/schemas/"
SCHEMAS = {
    "Deployment": {
        "x-kubernetes-group-version-kind": [
            {"group": "apps", "version": "v1", "kind": "Deployment"}
        ],
        "properties": {"spec": {"allOf": [{"$ref": REF + "DeploymentSpec"}]}},
    },
    "DeploymentSpec": {
        "properties": {
            "strategy": {
                "allOf": [{"$ref": REF + "Strategy"}], "x-kubernetes-patch-strategy": "retainKeys",
            },
            "containers": {
                "type": "array", "items": {"allOf": [{"$ref": REF + "Container"}]},
                "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name",
            },
        }
    },
    "Strategy": {"properties": {"type": {"type": "string"}, "rollingUpdate": {"type": "object"}}},
    "Container": {
        "properties": {
            "env": {
                "type": "array", "x-kubernetes-patch-strategy": "merge",
                "x-kubernetes-patch-merge-key": "name",
            },
            "args": {"type": "array"},
        }
    },
}  # fmt: skip


def test_kubectl_patch_drops_retains_and_deletes_by_merge_key() -> None:
    last = {
        "spec": {
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0}},
            "containers": [
                {"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
                 "args": ["--old"]},
                {"name": "sidecar"},
            ],
            "paused": True,
        }
    }  # fmt: skip
    new = {
        "spec": {
            "strategy": {"type": "Recreate"},
            "containers": [{"name": "a", "env": [{"name": "X", "value": "1"}], "args": ["--new"]}],
        }
    }
    root = kind_schema(SCHEMAS, "apps/v1", "Deployment")
    assert three_way_patch(SCHEMAS, last, new, root) == {
        "spec": {
            # retainKeys: the live rollingUpdate goes with the type change
            "strategy": {"type": "Recreate", "rollingUpdate": None, "$retainKeys": ["type"]},
            "containers": [
                {"name": "a",
                 "env": [{"name": "X", "value": "1"}, {"$patch": "delete", "name": "Y"}],
                 "args": ["--new"]},  # a list without a merge key is replaced
                {"$patch": "delete", "name": "sidecar"},
            ],
            "paused": None,  # in the last file, not in this one: removed
        }
    }  # fmt: skip


def test_a_kind_without_a_schema_is_a_plain_merge() -> None:
    assert kind_schema(SCHEMAS, "example.com/v1", "Widget") is None
    patch = three_way_patch({}, {"spec": {"a": 1, "b": [1]}}, {"spec": {"b": [2]}}, {})
    assert patch == {"spec": {"b": [2], "a": None}}
