from django.contrib import admin

from portal.core.models import WorkerHeartbeat


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ("worker", "seen_at", "beats")
    readonly_fields = ("worker", "seen_at", "beats")

    def has_add_permission(self, request) -> bool:
        return False
