"""Evaluate a rendered ValidatingAdmissionPolicy's CEL against one request without a control
plane: `main.go` (cel-go, the library the API server evaluates with) built once per session from
the Go module cache the local control plane's build fills (`deploy/devcluster/k8s`'s go.mod and
go.sum pin cel-go). Tests skip where that cache or Go is missing; the cluster tier judges the
same policies on a real API server."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).parent
K8S_MODULE = HERE.parents[2] / "deploy" / "devcluster" / "k8s"


@functools.cache
def _binary() -> Path | str:
    """The built evaluator, or why it could not be built."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        return "needs Go (the local control plane's toolchain)"
    work = Path(tempfile.mkdtemp(prefix="vapeval-"))
    for name in ("go.mod", "go.sum"):
        shutil.copy(K8S_MODULE / name, work / name)
    shutil.copy(HERE / "main.go", work / "main.go")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOSUMDB": "off"}
    build = subprocess.run(
        [go, "build", "-o", "vapeval", "."], cwd=work, env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    if build.returncode != 0:
        return f"cannot build the CEL evaluator offline (Go module cache): {build.stderr[-300:]}"
    return work / "vapeval"


def evaluate(policy: dict, kind: str, resource: str, obj: dict, user: str = "alice") -> dict:
    """{"matched", "denied": [messages]} of `policy` for a tenant creating `obj`."""
    binary = _binary()
    if isinstance(binary, str):
        pytest.skip(binary)
    group = {"Deployment": "apps", "StatefulSet": "apps", "DaemonSet": "apps", "Job": "batch",
             "CronJob": "batch"}.get(kind, "")  # fmt: skip
    request = {
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "name": obj["metadata"]["name"],
        "namespace": "acme-ml",
        "operation": "CREATE",
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
    }
    doc = {"policy": policy, "request": request, "object": obj, "oldObject": None}
    run = subprocess.run(
        [str(binary)], input=json.dumps(doc), capture_output=True, text=True, timeout=30,
        check=True,
    )  # fmt: skip
    out = json.loads(run.stdout)
    assert not out.get("error"), out["error"]
    return out
