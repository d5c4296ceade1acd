"""`python -m deploy.ociregistry samples --port N --state DIR`: the sample registry of `make run`.

Runs the loopback registry on 127.0.0.1:N, pushes the pre-flight samples (`samples.py`), seals
it (read-only from then on: nobody can push over or delete a sample) and stays in the
foreground while the registry runs; the supervisor restarts it on a crash, which
pushes the samples again (the registry keeps them in memory). SIGTERM stops the registry too.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from deploy import ociregistry
from deploy.ociregistry.samples import push_samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.ociregistry", description=__doc__)
    parser.add_argument("command", choices=["samples"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True)
    args = parser.parse_args(argv)
    seal = args.state / "samples.sealed"
    seal.unlink(missing_ok=True)  # a restarted registry is empty: it takes the samples again
    registry = ociregistry.start(args.state, address=f"127.0.0.1:{args.port}", seal_file=seal)
    stopping = []

    def stop(*_: object) -> None:
        # Only signal here: waiting in the handler would deadlock with the wait below (Popen).
        stopping.append(True)
        registry.process.terminate()

    signal.signal(signal.SIGTERM, stop)
    try:
        for reference in push_samples(registry.host):
            print(f"pushed {reference}", flush=True)
        seal.touch()
        print("sealed: read-only from now on", flush=True)
        code = registry.process.wait()
        return 0 if stopping else code or 1  # a registry that exits on its own is a crash
    finally:
        if registry.process.poll() is None:
            registry.stop()


if __name__ == "__main__":
    sys.exit(main())
