"""Read-only, searchable audit log for billing and support staff."""

from __future__ import annotations

from django.contrib import admin

from portal.audit.models import AuditLog


@admin.register(AuditLog)
class AuditLogAdmin(admin.ModelAdmin):
    list_display = ("at", "actor_label", "action", "object_type", "object_repr")
    list_filter = ("action", "object_type")
    search_fields = ("actor_label", "action", "object_repr", "object_id")
    date_hierarchy = "at"
    readonly_fields = [f.name for f in AuditLog._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
