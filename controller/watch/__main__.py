"""Entry point of `python -m controller.watch`: set Django up, run the watcher until a signal.

The process exits only on SIGTERM/SIGINT; every transient error is retried inside the threads.
With `--lease NAME` (the chart, `watcher.replicas` 2) it first waits to hold that Lease
(controller.leader), with Django and the client already set up so a standby starts at once;
it gives the Lease up on SIGTERM and exits if it loses it. Without (`make run`) it just runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

import django


def main() -> None:
    # `--help` says what this runs instead of starting to watch (the image test).
    parser = argparse.ArgumentParser(prog="python -m controller.watch", description=__doc__)
    parser.add_argument("--lease", default="", help="run only while holding this Lease")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    django.setup()
    from controller import metrics
    from controller.apply import kube_api_client
    from controller.leader import LeaseElector, lost_leadership
    from controller.watch.stream import RESOURCES
    from controller.watch.watcher import Watcher

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    api = kube_api_client()
    elector = LeaseElector(api, args.lease) if args.lease else None
    if elector:
        elector.stop = done  # SIGTERM ends the campaign too
        if not elector.acquire():
            return
        elector.keep(lost_leadership)
    metrics.serve("TRANCHE_WATCHER_METRICS_PORT", metrics.WATCHER_PORT)
    watcher = Watcher(api)
    logging.getLogger("controller.watch").info("watching %s", ", ".join(RESOURCES))
    watcher.start()
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        watcher.close()
        if elector:
            elector.release()


if __name__ == "__main__":
    main()
