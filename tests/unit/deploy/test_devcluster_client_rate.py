"""The dev cluster's client rate setting reaches the controller manager and scheduler only."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.devcluster.components import all_components
from deploy.devcluster.config import Ports, Settings, load_settings


def _settings(qps: int) -> Settings:
    return Settings(Path("/c"), Path("/s"), Ports(1, 2, 3, 4, 5, 6), client_qps=qps)


def _rate_flags(settings: Settings) -> dict[str, list[str]]:
    return {
        c.name: [a for a in c.argv if a.startswith("--kube-api-")] for c in all_components(settings)
    }


def test_default_keeps_the_components_own_rates():
    assert not any(_rate_flags(_settings(0)).values())


def test_raised_rate_goes_to_controller_manager_and_scheduler():
    flags = _rate_flags(_settings(150))
    want = ["--kube-api-qps=150", "--kube-api-burst=300"]
    assert flags["kube-controller-manager"] == want
    assert flags["kube-scheduler"] == want
    assert flags["kube-apiserver"] == flags["kwok"] == flags["etcd"] == []


def test_environment_sets_it_and_refuses_a_negative_rate(monkeypatch):
    monkeypatch.setenv("TRANCHE_KUBE_CLIENT_QPS", "80")
    assert load_settings().client_qps == 80
    monkeypatch.setenv("TRANCHE_KUBE_CLIENT_QPS", "-1")
    with pytest.raises(ValueError, match="TRANCHE_KUBE_CLIENT_QPS"):
        load_settings()


def test_scheduler_retries_unschedulable_pods_within_seconds():
    """A refused share that fits is retried in 20 s, not after the default 5 minutes."""
    (scheduler,) = [c for c in all_components(_settings(0)) if c.name == "kube-scheduler"]
    assert "--pod-max-in-unschedulable-pods-duration=20s" in scheduler.argv
