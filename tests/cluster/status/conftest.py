"""The controller tier's fixtures (tenants with orders) and a real Celery worker for the status
tests."""

from __future__ import annotations

from pathlib import Path

from tests.cluster.controller.conftest import (  # noqa: F401 - fixtures by name
    applier,
    controller_settings,
    make_tenant,
    tenant,
)
from tests.helpers.celery_worker import worker  # noqa: F401 - fixture by name

ROOT = Path(__file__).resolve().parents[3]
