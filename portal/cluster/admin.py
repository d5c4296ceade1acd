"""Read-only admin of the observed slice usage (support and billing staff look, nobody edits:
the watcher rewrites it from the cluster). The ledger's admin is billing's (`billing.admin`)."""

from __future__ import annotations

from django.contrib import admin

from portal.cluster.models import ProjectUsage
from portal.core.admin import ReadOnlyAdmin


@admin.register(ProjectUsage)
class ProjectUsageAdmin(ReadOnlyAdmin):
    list_display = ("project", "product", "allocated", "pending", "pending_reason", "updated_at")
