"""The GPU health alerts fire (issue #34): `promtool test rules` over
deploy/monitoring/gpu-health.rules.test.yaml, where each alert of gpu-health.rules.yaml fires
on its own series (a failed GPU, an unknown XID, a burst of application XIDs) and not on the
healthy ones beside it. promtool is Debian's `prometheus` package (deploy/local/bootstrap.sh)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers.skips import REPO

MONITORING = REPO / "deploy" / "monitoring"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="needs promtool: `apt-get install prometheus` (deploy/local/bootstrap.sh installs it)",
)


def _promtool(*args: str) -> str:
    done = subprocess.run(
        [PROMTOOL, *args], check=False, cwd=MONITORING, capture_output=True, text=True, timeout=60
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    return out


@needs_promtool
def test_the_rules_are_valid() -> None:
    assert "SUCCESS: 3 rules found" in _promtool("check", "rules", "gpu-health.rules.yaml")


@needs_promtool
def test_each_alert_fires_on_its_series_and_not_on_healthy_ones() -> None:
    out = _promtool("test", "rules", "gpu-health.rules.test.yaml")
    assert "SUCCESS" in out, out


def test_every_alert_has_a_promtool_case() -> None:
    """A rule added without a case would go untested: every alert name is tested."""
    import yaml

    rules = yaml.safe_load((MONITORING / "gpu-health.rules.yaml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    cases = yaml.safe_load((MONITORING / "gpu-health.rules.test.yaml").read_text())
    firing = {
        t["alertname"]
        for case in cases["tests"]
        for t in case.get("alert_rule_test", [])
        if t.get("exp_alerts")
    }
    assert alerts == firing, f"alerts without a firing case: {alerts - firing}"
