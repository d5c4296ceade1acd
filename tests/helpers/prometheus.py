"""Debian's real Prometheus (2.42, `prometheus` package: deploy/local/bootstrap.sh installs it)
on loopback, scraping what a test serves, with Tranche's rule files loaded; and its HTTP API.

`run_prometheus(tmp, targets, rules)` -> a `Prometheus` whose `query(promql)` returns the
result vector; stopped (and waited for) when the context ends. Scrapes and rule evaluations run
every second so a test sees rates and alerts within seconds, never by sleeping: callers poll
with `wait_for`. Shared by the tiers that check metrics against a real Prometheus.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.portal import free_port
from tests.helpers.wait import wait_for

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@dataclass(frozen=True)
class Prometheus:
    base: str
    log: Path

    def api(self, path: str, **params: str) -> dict:
        url = f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 (loopback)
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict]:
        """The instant vector of `promql` now (each item's `metric` labels and `value`)."""
        return self.api("query", query=promql)["result"]

    def values(self, promql: str, by: str) -> dict[str, float]:
        """label `by` -> value of each series `promql` returns now."""
        return {r["metric"].get(by, ""): float(r["value"][1]) for r in self.query(promql)}

    def targets_up(self) -> dict[str, str]:
        """job -> "up" when every target of the job is, else the health of one that is not."""
        health: dict[str, str] = {}
        for t in self.api("targets")["activeTargets"]:
            job = t["labels"]["job"]
            if health.get(job, "up") == "up":
                health[job] = t["health"]
        return health


Targets = dict[str, tuple[str | list[str], str]]


def _config(targets: Targets, rules: list[Path]) -> str:
    """Prometheus's YAML (JSON is YAML): one job per name, (host:port or several, path) each."""
    return json.dumps(
        {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(r) for r in rules],
            "scrape_configs": [
                {
                    "job_name": job,
                    "metrics_path": path,
                    "static_configs": [{"targets": [t] if isinstance(t, str) else list(t)}],
                }
                for job, (t, path) in targets.items()
            ],
        }
    )


@contextmanager
def run_prometheus(tmp: Path, targets: Targets, rules: list[Path]) -> Iterator[Prometheus]:
    """Start Prometheus scraping `targets` (job -> (host:port or a list of them, metrics path))
    with `rules`."""
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / "prometheus.yml"
    config.write_text(_config(targets, rules))
    port = free_port()
    log = tmp / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    prom = Prometheus(f"http://127.0.0.1:{port}", log)
    try:

        def ready() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{prom.base}/-/ready", timeout=2) as r:  # noqa: S310
                    return r.status == 200
            except OSError:
                return False

        wait_for(ready, 30, "Prometheus to be ready")
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
