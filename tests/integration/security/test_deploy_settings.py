"""Issue #14 item 7: under production settings `manage.py check --deploy` is clean (HSTS, SSL
redirect, secure cookies, ...), the proxy SSL header is configurable, and every page carries a
Content-Security-Policy that allows no inline or foreign code."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _production_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANCHE_DEBUG")}
    env |= {
        "TRANCHE_DEBUG": "0",
        "TRANCHE_SECRET_KEY": secrets.token_urlsafe(48),
        "TRANCHE_ALLOWED_HOSTS": "portal.example.com",
        **extra,
    }
    return env


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_under_production_settings():
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=_production_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_proxy_ssl_header_is_configurable():
    code = "from django.conf import settings; print(settings.SECURE_PROXY_SSL_HEADER)"
    env = _production_env(TRANCHE_PROXY_SSL_HEADER="X-Forwarded-Proto")
    result = _manage("shell", "-c", code, env=env)
    assert result.returncode == 0, result.stderr
    assert "('HTTP_X_FORWARDED_PROTO', 'https')" in result.stdout


def test_pages_carry_a_strict_content_security_policy(db, client):
    policy = client.get("/login/")["Content-Security-Policy"]
    assert "default-src 'self'" in policy
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy
