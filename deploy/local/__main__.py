"""`python -m deploy.local services-up|services-down|run|stop|status`: the local platform.

`run` starts PostgreSQL and Redis, migrates, seeds the demo data, then starts the portal (daphne),
a Celery worker and Celery beat as detached processes with logs under `.state/logs/`. Each step is
idempotent, so a second `run` only starts what is not running.
"""

from __future__ import annotations

import argparse
import sys

from deploy.local import platform, services


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.local", description=__doc__)
    parser.add_argument(
        "command", choices=["services-up", "services-down", "run", "stop", "status"]
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "services-up":
            for line in services.up():
                print(line)
        elif args.command == "services-down":
            services.down()
            print("PostgreSQL and Redis stopped")
        elif args.command == "run":
            platform.run()
        elif args.command == "stop":
            platform.stop()
        else:
            platform.status()
    except (services.ServiceError, platform.PlatformError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
