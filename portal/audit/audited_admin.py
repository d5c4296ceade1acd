"""`AuditedAdmin`: every change a staff user makes through an admin form (add, change, the
change list's inline edits, delete) writes an AuditLog row with the changed fields' values
before and after, in the admin's own transaction (Django wraps each admin save in one).

Used for what moves money or entitlement by hand: products and prices, GPU models and
organizations (renames; suspension goes through `tenants.services`, audited there too).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import models

from portal.audit.services import record_audit
from portal.core.admin import GuardedAdmin


def _value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def snapshot(obj: models.Model) -> dict[str, Any]:
    """The object's concrete field values, JSON-ready (Decimals as strings, FKs as ids)."""
    return {f.attname: _value(getattr(obj, f.attname)) for f in obj._meta.concrete_fields}


class AuditedAdmin(GuardedAdmin):
    def _organization_id(self, obj: models.Model) -> int | None:
        # By label, not by import: the audit app sits below the tenants app.
        if obj._meta.label == "tenants.Organization":
            return obj.pk
        return getattr(obj, "organization_id", None)

    def _record(self, request, obj, verb: str, before: dict, after: dict) -> None:
        record_audit(
            actor=request.user,
            action=f"{obj._meta.model_name}.{verb}",
            obj=obj,
            organization_id=self._organization_id(obj),
            before=before,
            after=after,
            system="admin",
        )

    def save_model(self, request, obj, form, change) -> None:
        before = snapshot(type(obj)._default_manager.get(pk=obj.pk)) if change else {}
        super().save_model(request, obj, form, change)
        after = snapshot(obj)
        changed = sorted(k for k in after if before.get(k) != after[k]) if change else list(after)
        if not changed:
            return  # a save that changed nothing is not an event
        self._record(
            request,
            obj,
            "change" if change else "add",
            {k: before[k] for k in changed if k in before},
            {k: after[k] for k in changed},
        )

    def delete_model(self, request, obj) -> None:
        self._record(request, obj, "delete", snapshot(obj), {})
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset) -> None:
        for obj in queryset:
            self._record(request, obj, "delete", snapshot(obj), {})
        super().delete_queryset(request, queryset)
