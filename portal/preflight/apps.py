"""Django app config of the pre-flight checks."""

from __future__ import annotations

from django.apps import AppConfig


class PreflightConfig(AppConfig):
    name = "portal.preflight"
    label = "preflight"
    default_auto_field = "django.db.models.BigAutoField"
