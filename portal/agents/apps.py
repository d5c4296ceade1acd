"""App config of the agents app."""

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "portal.agents"
    label = "agents"
    verbose_name = "Node agents"
