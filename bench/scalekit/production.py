"""The portal as the chart runs it, for benchmarks: production settings and `portal.serve`.

Production mode (issue #35): `TRANCHE_DEBUG` unset, a random secret key, the loopback host names
allowed, content-hashed static files collected first (`collectstatic`, as the image build does)
and the same server and process count as the chart (`python -m portal.serve`, one process per
core unless `TRANCHE_PORTAL_PROCESSES` says otherwise). The one difference from a real install:
the bench speaks plain HTTP on loopback, so the HTTPS redirect is off
(`TRANCHE_SSL_REDIRECT=0`; behind the chart's TLS proxy the portal sees HTTPS).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def production_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default os.environ) with the production settings a bench's portal runs with."""
    env = dict(os.environ if base is None else base)
    env.pop("TRANCHE_DEBUG", None)
    env.setdefault("TRANCHE_SECRET_KEY", secrets.token_urlsafe(48))
    env["TRANCHE_ALLOWED_HOSTS"] = "127.0.0.1,localhost"
    env["TRANCHE_SSL_REDIRECT"] = "0"
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    return env


def collect_static(env: dict[str, str], tree: Path = ROOT) -> None:
    """Production serves the collected, hashed files only (STATIC_ROOT, git-ignored)."""
    subprocess.run(
        [sys.executable, str(tree / "manage.py"), "collectstatic", "--noinput", "-v0"],
        cwd=tree, env={**env, "PYTHONPATH": str(tree)}, check=True,
    )  # fmt: skip


def portal_argv(port: int, processes: int | None = None, role: str = "pages") -> list[str]:
    """The chart's portal command line on loopback `port`."""
    from portal import serve

    return [sys.executable, *serve.argv(port, processes=processes, role=role)]


def processes() -> int:
    """How many processes `portal.serve` starts here (TRANCHE_PORTAL_PROCESSES or the cores)."""
    from portal import serve

    return serve.default_processes()
