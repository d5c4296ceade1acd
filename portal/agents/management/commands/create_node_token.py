"""`manage.py create_node_token NODE [--rotate] [--output FILE]`: issue a node agent's token.

Prints the token (or writes it to FILE with mode 0600); it is stored hashed and cannot be
shown again. Without --rotate an existing token is kept and the command fails, so a typo never
silently cuts off a running agent.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from portal.agents import services


class Command(BaseCommand):
    help = "Create (or --rotate) the websocket token of a node agent."

    def add_arguments(self, parser) -> None:
        parser.add_argument("node", help="Kubernetes node name the agent runs for")
        parser.add_argument("--rotate", action="store_true", help="replace an existing token")
        parser.add_argument("--output", help="write the token to this file (mode 0600)")

    def handle(self, *args, node: str, rotate: bool, output: str | None, **opts) -> None:
        try:
            token = services.issue_node_token(node, rotate=rotate)
        except services.TokenExistsError as exc:
            raise CommandError(str(exc)) from exc
        if output:
            path = Path(output)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
            self.stdout.write(f"token for node {node} written to {path}")
        else:
            self.stdout.write(token)
