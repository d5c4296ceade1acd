"""Entry point of `python -m controller.beat --lease tranche-beat`: Celery beat, run only while
this process holds the Lease (controller.leader), so the chart may run two (`beat.replicas`)
and a drained node does not stop the periodic tasks. Two beats at once would send every
periodic task twice; the Lease makes that impossible while both can reach the API server.

Django, Celery and the Lease client are set up before the campaign, so a standby starts beat
as soon as it wins. The Lease is given up when beat stops (SIGTERM); a lost Lease ends the
process (`lost_leadership`). `make run` starts `celery beat` directly (one, no Lease).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

import django


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m controller.beat", description=__doc__)
    parser.add_argument("--lease", default="tranche-beat", help="the Lease to hold while beating")
    parser.add_argument("--schedule", default="/tmp/celerybeat-schedule")  # noqa: S108
    parser.add_argument("--loglevel", default="INFO")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    django.setup()
    from celery import current_app as app  # the portal's app, configured by django.setup()

    from controller.apply import kube_api_client
    from controller.leader import LeaseElector, lost_leadership

    elector = LeaseElector(kube_api_client(), args.lease)
    campaign_over = threading.Event()
    elector.stop = campaign_over
    signal.signal(signal.SIGTERM, lambda *_: campaign_over.set())
    if not elector.acquire():
        return
    elector.stop = threading.Event()  # beat installs its own SIGTERM handler from here on
    elector.keep(lost_leadership)
    try:
        app.Beat(loglevel=args.loglevel, schedule=args.schedule).run()
    finally:
        elector.release()


if __name__ == "__main__":
    main()
