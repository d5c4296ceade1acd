"""App config of the cluster-access app."""

from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "portal.access"
    label = "access"
    verbose_name = "Cluster access"
