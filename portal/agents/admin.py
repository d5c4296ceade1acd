"""Staff admin of node tokens: adding one shows its plaintext once; revoke is an action."""

from __future__ import annotations

from django.contrib import admin, messages

from portal.agents import services
from portal.agents.models import NodeToken, PodSliceStatus
from portal.core.admin import GuardedAdmin


@admin.register(NodeToken)
class NodeTokenAdmin(GuardedAdmin):
    list_display = ("node_name", "token_prefix", "created_at", "last_seen_at", "revoked_at")
    search_fields = ("node_name",)
    readonly_fields = (
        "token_prefix",
        "created_by",
        "created_at",
        "last_seen_at",
        "revoked_at",
        "gpus",
        "dropped_messages",
    )
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        return ("node_name",) if obj is None else ("node_name", *self.readonly_fields)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is None else ("node_name", *self.readonly_fields)

    def save_model(self, request, obj, form, change) -> None:
        if change:
            return  # nothing editable: rotate by revoking and adding again
        token = services.issue_node_token(obj.node_name, created_by=request.user, rotate=True)
        obj.pk = NodeToken.objects.get(node_name=obj.node_name).pk
        messages.warning(
            request,
            f"Token for node {obj.node_name}: {token} — copy it into the agent's token file "
            "now; it is stored hashed and will not be shown again.",
        )

    @admin.action(description="Revoke the selected tokens (the agents are refused at once)")
    def revoke(self, request, queryset) -> None:
        count = sum(services.revoke_node_token(t.node_name, actor=request.user) for t in queryset)
        messages.info(request, f"Revoked {count} token(s).")


@admin.register(PodSliceStatus)
class PodSliceStatusAdmin(GuardedAdmin):
    list_display = (
        "namespace",
        "pod_name",
        "node_name",
        "memory_used_bytes",
        "memory_limit_bytes",
        "rejected_allocations",
        "compute_used_percent",
        "updated_at",
    )
    list_filter = ("node_name",)
    search_fields = ("namespace", "pod_name")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
