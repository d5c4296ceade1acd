"""Read-only, searchable audit log for billing and support staff."""

from __future__ import annotations

from django.contrib import admin

from portal.audit.models import AuditLog
from portal.core.admin import ReadOnlyAdmin


@admin.register(AuditLog)
class AuditLogAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor_label", "action", "object_type", "object_repr")
    list_filter = ("action", "object_type")
    search_fields = ("actor_label", "action", "object_repr", "object_id")
    date_hierarchy = "at"
    readonly_fields = [f.name for f in AuditLog._meta.fields]
