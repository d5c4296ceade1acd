"""Channel-layer group names, derived from ids (or a hash of the session key) only, never from
user input."""

from __future__ import annotations

import hashlib


def project_group(project_id: int) -> str:
    """One group per project: agents publish its pods' status there, live pages listen."""
    return f"project.{int(project_id)}"


def user_access_group(user_id: int) -> str:
    """One group per user: its live sockets re-check access when its rights change."""
    return f"access.user.{int(user_id)}"


def session_group(session_key: str) -> str:
    """One group per browser session: its sockets close when it logs out. Named by a hash of
    the key (the key is a credential, and group names end up in Redis)."""
    return "session." + hashlib.sha256(session_key.encode()).hexdigest()[:32]


FLEET_GROUP = "fleet"  # the support console: any node's slices or GPUs changed
