"""CLI: `python -m deploy.tools helm` builds helm if needed and prints its path."""

from __future__ import annotations

import argparse
import sys

from deploy.tools.build import BuildError, ensure_helm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.tools", description=__doc__)
    parser.add_argument("tool", choices=["helm"])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args(argv)
    try:
        print(ensure_helm(force=args.force))
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
