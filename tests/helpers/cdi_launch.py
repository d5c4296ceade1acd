"""What a container runtime does with a CDI spec, played in a private mount namespace, for the
integration tier's agent and backstop tests (no cluster there: the cluster tier runs pods on
the dev cluster's real node, where containerd applies the spec for real).

`apply_cdi(spec, devices)` -> the environment and mounts a runtime would apply for those
devices; `launch_script(mounts, command)` -> the shell run under `unshare --mount` that binds
each mount (read-only where the spec says so; /etc/ld.so.preload last, so nothing before the
workload loads the core) and execs the workload.
"""

from __future__ import annotations

import shlex
from pathlib import Path


def apply_cdi(spec: dict, device_names: list[str]) -> tuple[dict[str, str], list[dict]]:
    """Environment and mounts a runtime would apply for these devices of the spec."""
    env: dict[str, str] = {}
    mounts: list[dict] = []
    edits = [spec.get("containerEdits", {})] + [
        d.get("containerEdits", {}) for d in spec["devices"] if d["name"] in device_names
    ]
    for e in edits:
        for item in e.get("env", []):
            k, _, v = item.partition("=")
            env[k] = v
        mounts += e.get("mounts", [])
    return env, mounts


def launch_script(mounts: list[dict], command: list[str]) -> str:
    """Shell run inside `unshare --mount`: bind each mount, then exec the workload."""
    lines = ["set -e", "mount --make-rprivate /"]
    ordered = sorted(mounts, key=lambda m: m["containerPath"] == "/etc/ld.so.preload")
    for m in ordered:
        host, target = shlex.quote(m["hostPath"]), shlex.quote(m["containerPath"])
        is_dir = Path(m["hostPath"]).is_dir()
        # Mount points must exist; they are created empty on the host (an empty
        # /etc/ld.so.preload preloads nothing), and only the private namespace sees the content.
        lines.append(
            f"mkdir -p {target}"
            if is_dir
            else f"mkdir -p $(dirname {target}) && [ -e {target} ] || : > {target}"
        )
        lines.append(f"mount --bind {host} {target}")
        if "ro" in m.get("options", []):
            lines.append(f"mount -o remount,bind,ro {target}")
    lines.append("exec " + " ".join(shlex.quote(c) for c in command))
    return "\n".join(lines)
