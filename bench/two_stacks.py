"""Two `make run` stacks side by side on one machine, then `make stop` of each (issue #30).

Stack A is this worktree as its environment says (ports, `.state/`); stack B the same checkout
with every port, the channel prefix, the real node's network and both state folders moved. Both
run at once: each portal answers `/readyz` (PostgreSQL, Redis, worker/beat/watcher heartbeats)
with 200, and no supervised process of either restarts (the agents' fixed metrics ports made
both crash-loop before). Then B is stopped while A runs (A stays ready) and A after it: each
`make stop` leaves no process of its stack (found by the state folder in their environment),
no listening port of it, and nothing of its real node (`deploy.devcluster.node.run.leftovers`).

    python -m bench.two_stacks [--b-state /var/tmp/tranche-two-stacks-b] [--settle 30]

Prints the figures and writes bench/results/two_stacks.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from deploy import supervisor

REPO = Path(__file__).resolve().parents[1]
# Stack B's settings: away from every helper worktree's ports and node networks on this machine.
B_PORTS = {
    "TRANCHE_DB_PORT": 15491, "TRANCHE_REDIS_PORT": 16491, "TRANCHE_PORT": 8191,
    "TRANCHE_APISERVER_PORT": 17491, "TRANCHE_ETCD_PORT": 12991, "TRANCHE_ETCD_PEER_PORT": 12992,
    "TRANCHE_KCM_PORT": 17493, "TRANCHE_SCHEDULER_PORT": 17495, "TRANCHE_KWOK_PORT": 17497,
    "TRANCHE_KUBELET_PORT": 17410, "TRANCHE_KUBELET_HEALTHZ_PORT": 17420,
    "TRANCHE_CONTAINERD_STREAM_PORT": 17430, "TRANCHE_AGENT_METRICS_PORT": 20591,
}  # fmt: skip
PORT_NAMES = [*B_PORTS]


def stack_env(state: Path, overrides: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, **overrides, "TRANCHE_STATE_DIR": str(state)}
    env["TRANCHE_CLUSTER_STATE"] = str(state / "cluster")
    env.setdefault("TRANCHE_DEBUG", "1")
    env["PYTHONPATH"] = str(REPO)
    env.pop("KUBECONFIG", None)  # each stack its own dev cluster
    return env


def ports(env: dict[str, str]) -> list[int]:
    return [int(env[name]) for name in PORT_NAMES if env.get(name)]


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def processes_of(state: Path) -> list[str]:
    """'pid command' of every process whose environment names `state` as its state folder."""
    mark = f"TRANCHE_STATE_DIR={state}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark in (entry / "environ").read_bytes():
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{entry.name} {cmd[:120]}")
        except OSError:
            continue
    return found


def node_leftovers(env: dict[str, str]) -> list[str]:
    """What of the stack's real nodes is still on the machine (its settings read from `env`)."""
    code = (
        "from deploy.devcluster.config import load_node_settings, load_settings\n"
        "from deploy.devcluster.node import run\n"
        "from deploy.devcluster.node.render import node_paths\n"
        "s, n = load_settings(), load_node_settings()\n"
        "for i in range(max(s.real_nodes, 1)):\n"
        "    print('\\n'.join(run.leftovers(s, node_paths(s, n, i))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True,
                         text=True, check=True)  # fmt: skip
    return [line for line in out.stdout.splitlines() if line.strip()]


def readyz(env: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{env['TRANCHE_PORT']}/readyz", timeout=3):
            return 200
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def restarts(state: Path) -> dict[str, int]:
    """name -> restarts of every supervised process (deploy.local.platform's status file)."""
    status = supervisor.read_status(state / "run" / "supervisor-status.json")
    return {name: st["restarts"] for name, st in status.items()}


def make(target: str, env: dict[str, str], log: Path) -> float:
    started = time.monotonic()
    with log.open("ab") as out:
        done = subprocess.run(["make", target], cwd=REPO, env=env, stdout=out,
                              stderr=subprocess.STDOUT, timeout=900, check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"make {target} failed ({done.returncode}); see {log}")
    return time.monotonic() - started


def wait(predicate, timeout: float) -> float | None:
    started = time.monotonic()
    return time.monotonic() - started if supervisor.wait_until(predicate, timeout, 0.5) else None


def stopped(name: str, env: dict[str, str], state: Path, log: Path) -> dict:
    took = make("stop", env, log)
    return {"make_stop_s": round(took, 1), "processes_left": processes_of(state),
            "ports_listening": [p for p in ports(env) if listening(p)],
            "node_leftovers": node_leftovers(env)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # /var/tmp: the services refuse a state folder PostgreSQL could not traverse (see services)
    default_b = Path("/var/tmp/tranche-two-stacks-b")  # noqa: S108
    parser.add_argument("--b-state", type=Path, default=default_b)
    parser.add_argument("--settle", type=float, default=30.0, help="seconds both run together")
    args = parser.parse_args()
    a_state = Path(os.environ.get("TRANCHE_STATE_DIR", REPO / ".state")).resolve()
    a = stack_env(a_state, {})
    a_net = a.get("TRANCHE_NODE_NET", "10.200")
    b_net = f"10.{(int(a_net.split('.')[1]) + 19) % 256}"
    prefix = a.get("TRANCHE_CHANNELS_PREFIX", "tranche")
    moved = {k: str(v) for k, v in B_PORTS.items()}
    b = stack_env(args.b_state, moved | {"TRANCHE_NODE_NET": b_net,
                                         "TRANCHE_CHANNELS_PREFIX": prefix + "b"})  # fmt: skip
    args.b_state.mkdir(parents=True, exist_ok=True)
    logs = {"A": a_state / "logs" / "two-stacks.log", "B": args.b_state / "two-stacks.log"}
    logs["A"].parent.mkdir(parents=True, exist_ok=True)
    clash = set(ports(a)) & set(ports(b))
    if clash:
        raise SystemExit(f"stack A already uses ports {sorted(clash)} meant for stack B")
    figures: dict = {"A": {"state": str(a_state)}, "B": {"state": str(args.b_state)}}
    try:
        for name, env in (("A", a), ("B", b)):
            figures[name]["make_run_s"] = round(make("run", env, logs[name]), 1)
        for name, env in (("A", a), ("B", b)):
            figures[name]["ready_after_run_s"] = wait(lambda e=env: readyz(e) == 200, 180)
        time.sleep(args.settle)  # both stacks run side by side for this long, then are checked
        for name, env, state in (("A", a, a_state), ("B", b, args.b_state)):
            figures[name]["readyz_after_settle"] = readyz(env)
            figures[name]["restarts"] = restarts(state)
        figures["B"] |= stopped("B", b, args.b_state, logs["B"])
        figures["A"]["readyz_after_b_stopped"] = readyz(a)
        figures["A"] |= stopped("A", a, a_state, logs["A"])
    finally:
        for env, state in ((b, args.b_state), (a, a_state)):
            if processes_of(state):
                make("stop", env, logs["A"] if state == a_state else logs["B"])
    out = REPO / "bench" / "results" / "two_stacks.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=1))
    print(json.dumps(figures, indent=1))
    ok = (
        all(
            figures[n]["readyz_after_settle"] == 200
            and figures[n]["restarts"]  # the supervisor ran its processes
            and not any(figures[n]["restarts"].values())
            and not figures[n]["processes_left"]
            and not figures[n]["ports_listening"]
            and not figures[n]["node_leftovers"]
            for n in ("A", "B")
        )
        and figures["A"]["readyz_after_b_stopped"] == 200
    )
    print("two stacks side by side:", "OK" if ok else "NOT OK")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
