"""Write the audit trail. Call inside the service's transaction (never on its own)."""

from __future__ import annotations

from typing import Any

from django.db import models

from portal.audit.models import AuditLog


def record_audit(**fields: Any) -> AuditLog:
    """Append one audit row (the fields of `audit_row`: actor, action, obj, before, after,
    organization_id, system). `actor` is a user or None with `system` naming the component."""
    row = audit_row(**fields)
    row.save()
    return row


def record_audits(rows: list[AuditLog]) -> None:
    """Append several audit rows (`audit_row`) in one statement."""
    AuditLog.objects.bulk_create(rows)


def audit_row(
    *,
    actor: Any,
    action: str,
    obj: models.Model,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    organization_id: int | None = None,
    system: str = "",
) -> AuditLog:
    """One audit row, not yet stored (`record_audits` stores a batch of them)."""
    user = actor if getattr(actor, "is_authenticated", False) else None
    label = user.get_username() if user else f"system:{system or 'unknown'}"
    return AuditLog(
        actor=user,
        actor_label=label[:200],
        action=action,
        organization_id=organization_id,
        object_type=obj._meta.label,
        object_id=str(obj.pk),
        object_repr=str(obj)[:200],
        before=before or {},
        after=after or {},
    )
