"""App config of the observed state (`portal.cluster`)."""

from __future__ import annotations

from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "portal.cluster"
    label = "cluster"
    verbose_name = "Cluster observations"
