"""CLI: `python -m deploy.images build [--out DIR] [--work DIR]`: both images, sizes printed;
`python -m deploy.images load [--registry NAME]`: import them into the dev cluster's real nodes
(deploy/images/node.py).

Writes an OCI image layout (default `.state/images/oci`) and `images.json` next to it with each
image's reference, manifest and layer digests and sizes. Exit 1 when a step fails (the message
names it), 2 on usage errors. Needs root: see deploy/images/build.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from deploy.images import node
from deploy.images.build import REPO, ImageBuildError, build_images

SIZE_GOAL_MB = 300


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.images", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build both images into an OCI layout")
    build.add_argument("--out", type=Path, default=REPO / ".state" / "images" / "oci")
    build.add_argument("--work", type=Path, default=REPO / ".state" / "images" / "work")
    load = sub.add_parser("load", help="import the built images into the dev cluster's real nodes")
    load.add_argument("--layout", type=Path, default=REPO / ".state" / "images" / "oci")
    load.add_argument("--registry", default=node.REGISTRY)
    args = parser.parse_args(argv)
    if args.command == "load":
        try:
            loaded = node.load(args.layout, args.registry)
        except node.LoadError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        for name, images in loaded.items():
            print(f"{name}: {' '.join(images)}")
        return 0
    started = time.monotonic()
    try:
        report = build_images(args.out.resolve(), args.work.resolve())
    except ImageBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    (args.out.parent / "images.json").write_text(json.dumps(report, indent=2) + "\n")
    for image, facts in report.items():
        over = " (over the 300 MB goal)" if facts["uncompressed_mb"] > SIZE_GOAL_MB else ""
        print(f"{image:20} {facts['ref']:36} {facts['compressed_mb']:7.1f} MB compressed "
              f"{facts['uncompressed_mb']:7.1f} MB unpacked{over}")  # fmt: skip
    print(f"OCI layout: {args.out}  (built in {time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
