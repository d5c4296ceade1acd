"""Platform health in the admin, the guarded base of every model admin, and the read-only base
for every status-bearing model admin."""

from django.contrib import admin

from portal.core.models import WorkerHeartbeat
from portal.core.tokens import is_secret_lookup


class GuardedAdmin(admin.ModelAdmin):
    """Base of every Tranche model admin: no filter may reach a secret field.

    Django allows any lookup on a model's own fields from the change list's query string
    (`?token__regex=^a`), so a view-only user could recover a secret one character at a time.
    """

    def lookup_allowed(self, lookup, value, request=None) -> bool:
        if is_secret_lookup(lookup):
            return False
        return super().lookup_allowed(lookup, value, request)


class ReadOnlyAdmin(GuardedAdmin):
    """Visible to staff with the view permission; changes go through services only."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(GuardedAdmin):
    list_display = ("worker", "role", "seen_at", "beats")
    list_filter = ("role",)
    readonly_fields = ("worker", "role", "seen_at", "beats")

    def has_add_permission(self, request) -> bool:
        return False
