"""The Django settings pytest-django loads (pyproject's DJANGO_SETTINGS_MODULE).

The portal's own settings for every run that collects a tier using the portal. A run of only
portal-free tiers (``pytest tests/native``) gets a bare configuration instead (no apps, no
database), so it needs none of the portal's environment (TRANCHE_DEBUG, a secret key, a
database). pytest-django imports this before any conftest and passes it nothing, so the
decision is made from the command line's paths.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
NO_PORTAL_TIERS = frozenset({"native"})


def _tier(path: Path) -> str | None:
    try:
        return path.relative_to(TESTS_DIR).parts[0]
    except (ValueError, IndexError):
        return None


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # an argument that is no path at all (too long a name)
        return False


def needs_portal(args: list[str], invoked: Path) -> bool:
    """Whether a run over these command-line arguments collects a tier that uses the portal."""
    paths = [a.split("::", 1)[0] for a in args if not a.startswith("-")]
    paths = [p for p in paths if _exists(invoked / p)]
    if not paths:
        return True  # testpaths: every tier
    return any(_tier((invoked / p).resolve()) not in NO_PORTAL_TIERS for p in paths)


# Only pytest's own command line says which tiers run. Tests start `manage.py` and the platform
# as subprocesses that inherit DJANGO_SETTINGS_MODULE; those always get the portal's settings
# (their arguments, e.g. `shell -c CODE`, are no test paths).
if "pytest" not in sys.modules or needs_portal(sys.argv[1:], Path.cwd()):
    from portal.settings import *  # noqa: F403
else:
    SECRET_KEY = "tests-without-the-portal"  # never serves anything
    INSTALLED_APPS: list[str] = []
    DATABASES: dict[str, dict[str, str]] = {}
    USE_TZ = True
