"""Settings refuse an insecure production configuration and read typed environment values."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from portal import env
from portal.settings import check_production_config

REPO = Path(__file__).resolve().parents[2]


def test_production_without_secret_or_hosts_is_refused():
    with pytest.raises(env.ConfigError) as err:
        check_production_config(debug=False, secret_key="", allowed_hosts=[])
    assert "TRANCHE_SECRET_KEY" in str(err.value)
    assert "TRANCHE_ALLOWED_HOSTS" in str(err.value)


def test_production_with_wildcard_host_is_refused():
    with pytest.raises(env.ConfigError, match="TRANCHE_ALLOWED_HOSTS"):
        check_production_config(debug=False, secret_key="x" * 40, allowed_hosts=["*"])


def test_production_with_real_secret_and_hosts_is_accepted():
    check_production_config(debug=False, secret_key="k" * 50, allowed_hosts=["portal.example"])


def test_settings_module_refuses_to_load_in_production_without_secret():
    """The real settings module, imported in a fresh interpreter, stops the process."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRANCHE_")}
    proc = subprocess.run(
        [sys.executable, "-c", "import portal.settings"],
        cwd=REPO,
        env={**clean, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0
    assert "Refusing to start in production" in proc.stderr


def test_env_bool_rejects_garbage(monkeypatch):
    monkeypatch.setenv("X_FLAG", "maybe")
    with pytest.raises(env.ConfigError, match="X_FLAG"):
        env.env_bool("X_FLAG")
    monkeypatch.setenv("X_FLAG", "Yes")
    assert env.env_bool("X_FLAG") is True


def test_env_int_bounds(monkeypatch):
    monkeypatch.setenv("X_PORT", "0")
    with pytest.raises(env.ConfigError, match="minimum"):
        env.env_int("X_PORT", 1, minimum=1)
    monkeypatch.setenv("X_PORT", "abc")
    with pytest.raises(env.ConfigError, match="not an integer"):
        env.env_int("X_PORT", 1)


def test_env_secret_reads_file(monkeypatch, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t\n")
    monkeypatch.setenv("X_SECRET_FILE", str(secret))
    assert env.env_secret("X_SECRET") == "s3cr3t"
    monkeypatch.setenv("X_SECRET_FILE", str(tmp_path / "missing"))
    with pytest.raises(env.ConfigError, match="X_SECRET_FILE"):
        env.env_secret("X_SECRET")
