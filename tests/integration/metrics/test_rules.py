"""The shipped alert rules are valid and each alert fires on its unit-test series and not on the
healthy ones beside it (`promtool test rules`, Debian's Prometheus 2.42): tranche.rules.yaml's
tests are deploy/chart/tranche/monitoring/tranche.rules.test.yaml; every alert has its own."""

from __future__ import annotations

import subprocess

import yaml

from tests.helpers.portal import REPO
from tests.helpers.prometheus import PROMTOOL

MONITORING = REPO / "deploy" / "chart" / "tranche" / "monitoring"


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=MONITORING, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def test_rule_files_are_valid():
    gpu_health = REPO / "deploy" / "monitoring" / "gpu-health.rules.yaml"  # issue #34's
    res = _promtool("check", "rules", "tranche.rules.yaml", str(gpu_health))
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_alert_fires_on_its_series_and_not_on_healthy_ones():
    rules = yaml.safe_load((MONITORING / "tranche.rules.yaml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    tests = yaml.safe_load((MONITORING / "tranche.rules.test.yaml").read_text())
    cases = [c for t in tests["tests"] for c in t["alert_rule_test"]]
    assert {c["alertname"] for c in cases} == alerts, "an alert without a unit test"
    for alert in alerts:  # each alert: one case where it fires, one where it does not
        assert any(c["alertname"] == alert and c["exp_alerts"] for c in cases), alert
        assert any(c["alertname"] == alert and not c["exp_alerts"] for c in cases), alert
    res = _promtool("test", "rules", "tranche.rules.test.yaml")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout
