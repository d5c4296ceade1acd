"""Platform health in the admin, and the read-only base for every status-bearing model admin."""

from django.contrib import admin

from portal.core.models import WorkerHeartbeat


class ReadOnlyAdmin(admin.ModelAdmin):
    """Visible to staff with the view permission; changes go through services only."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ("worker", "role", "seen_at", "beats")
    list_filter = ("role",)
    readonly_fields = ("worker", "role", "seen_at", "beats")

    def has_add_permission(self, request) -> bool:
        return False
