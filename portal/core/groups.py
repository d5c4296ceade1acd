"""Channel-layer group names, derived from ids only (never from user input)."""

from __future__ import annotations


def project_group(project_id: int) -> str:
    """One group per project: agents publish its pods' status there, live pages listen."""
    return f"project.{int(project_id)}"


def user_access_group(user_id: int) -> str:
    """One group per user: its live sockets re-check access when its rights change."""
    return f"access.user.{int(user_id)}"


FLEET_GROUP = "fleet"  # the support console: any node's slices or GPUs changed
