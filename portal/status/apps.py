"""App config of the live status pages (no models: what they show lives in `portal.cluster`
and `portal.agents`)."""

from __future__ import annotations

from django.apps import AppConfig


class StatusConfig(AppConfig):
    name = "portal.status"
    verbose_name = "Live status"

    def ready(self) -> None:
        from portal.status import signals  # noqa: F401 (connects the access-change receivers)
