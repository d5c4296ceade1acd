"""Entry point of `python -m controller.watch`: set Django up, run the watcher until a signal.

The process exits only on SIGTERM/SIGINT; every transient error is retried inside the threads.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

import django


def main() -> None:
    # No options; `--help` says what this runs instead of starting to watch (the image test).
    argparse.ArgumentParser(prog="python -m controller.watch", description=__doc__).parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    django.setup()
    from controller import metrics
    from controller.apply import kube_api_client
    from controller.watch.stream import RESOURCES
    from controller.watch.watcher import Watcher

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    metrics.serve("TRANCHE_WATCHER_METRICS_PORT", metrics.WATCHER_PORT)
    watcher = Watcher(kube_api_client())
    logging.getLogger("controller.watch").info("watching %s", ", ".join(RESOURCES))
    watcher.start()
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        watcher.close()


if __name__ == "__main__":
    main()
