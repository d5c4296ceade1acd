"""The portal's Prometheus metrics: the readiness outcome where operators' monitoring reads it.

`/readyz` answers a probe; a stalled provisioning or a silent API server should also page
someone, so each scrape of `/metrics` runs the controller scope's checks once (the same bounded
checks, `portal.core.health.evaluate`, within about a second) and exports:

- `tranche_ready{scope}`: 1 when the scope's `/readyz` would answer 200, for "portal",
  "default" and "controller" (the verdicts derived from that one evaluation);
- `tranche_readiness_check_ok{check}`: 1 or 0 per check (database, redis, cluster, processes,
  backlog, ...), the reason a verdict is 0;
- `tranche_readiness_check_seconds`: how long the evaluation took.

An example alert: `tranche_ready{scope="controller"} == 0 for 2m`. Rendered fresh per scrape by
a collector of its own registry, so nothing lingers from an earlier answer.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from portal.core import health

SCOPE_LABELS = {"": "default", "portal": "portal", "controller": "controller"}


class ReadinessCollector(Collector):
    def collect(self):
        started = time.monotonic()
        checks = health.evaluate("controller")
        took = time.monotonic() - started
        ready = GaugeMetricFamily(
            "tranche_ready", "1 when the scope's /readyz answers 200", labels=["scope"]
        )
        for scope, ok in health.verdicts(checks).items():
            ready.add_metric([SCOPE_LABELS[scope]], 1.0 if ok else 0.0)
        per_check = GaugeMetricFamily(
            "tranche_readiness_check_ok", "1 when the readiness check passes", labels=["check"]
        )
        for name, (ok, _message) in checks.items():
            per_check.add_metric([name], 1.0 if ok else 0.0)
        seconds = GaugeMetricFamily(
            "tranche_readiness_check_seconds", "time the readiness checks of this scrape took"
        )
        seconds.add_metric([], took)
        yield from (ready, per_check, seconds)


def render() -> bytes:
    """The Prometheus text exposition of one fresh readiness evaluation."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReadinessCollector())
    return generate_latest(registry)
