"""CLI: `python -m deploy.devcluster build|up|down|status|nodes`.

Exit codes: 0 success, 1 a component or build failed (the message names it and
its log), 2 usage error. The Makefile's cluster-build/up/down call this.
"""

from __future__ import annotations

import argparse
import os
import sys

from deploy.devcluster import build as builder
from deploy.devcluster import launcher
from deploy.devcluster.config import load_settings
from deploy.devcluster.gotool import BuildError
from deploy.devcluster.node.run import NodeError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m deploy.devcluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the binaries into the version cache")
    build.add_argument("--force", action="store_true", help="rebuild even if up to date")
    up = sub.add_parser("up", help="build if needed, start, print the kubeconfig path")
    up.add_argument("--fresh", action="store_true", help="start from an empty etcd")
    down = sub.add_parser("down", help="stop every component this launcher started")
    down.add_argument("--purge", action="store_true", help="also delete .state/cluster")
    sub.add_parser("status", help="show each component's pid and health")
    nodes = sub.add_parser("nodes", help="create kwok fake GPU nodes")
    nodes.add_argument("--count", type=int, default=1)
    nodes.add_argument("--gpu-model", default="Tesla V100-PCIE-32GB")
    nodes.add_argument("--prefix", default="kwok-gpu")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one CLI command; return the process exit code."""
    args = _parser().parse_args(argv)
    settings = load_settings()
    try:
        if args.command == "build":
            builder.build(settings, force=args.force)
        elif args.command == "up":
            print(launcher.up(settings, fresh=args.fresh))
        elif args.command == "down":
            launcher.down(settings, purge=args.purge)
        elif args.command == "status":
            states = launcher.status(settings)
            for name, state in states.items():
                print(f"{name:24} {state}")
            print(f"kubeconfig: {settings.kubeconfig}")
            return 0 if all("healthy:" in s for s in states.values()) else 1
        elif args.command == "nodes":
            from kubernetes import config

            kubeconfig = os.environ.get("KUBECONFIG") or str(settings.kubeconfig)
            api = config.new_client_from_config(config_file=kubeconfig)
            from deploy.devcluster.nodes import create_fake_gpu_nodes

            for name in create_fake_gpu_nodes(api, args.count, args.gpu_model, args.prefix):
                print(name)
    except (BuildError, launcher.StartError, NodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
