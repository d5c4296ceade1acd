"""App config of the live status pages (no models: rows live in `portal.agents`)."""

from __future__ import annotations

from django.apps import AppConfig


class StatusConfig(AppConfig):
    name = "portal.status"
    verbose_name = "Live status"
