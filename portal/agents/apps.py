"""App config of the agents app."""

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "portal.agents"
    label = "agents"
    verbose_name = "Node agents"

    def ready(self) -> None:
        from portal.agents.selectors import silent_nodes_line
        from portal.core.heartbeats import INFORMATIONAL_CHECKS

        INFORMATIONAL_CHECKS.append(silent_nodes_line)
