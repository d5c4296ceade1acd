"""Staff admin of orders and subscriptions: read-only (they change only through services),
with CSV export actions."""

from __future__ import annotations

from django.contrib import admin

from portal.core.admin import ReadOnlyAdmin
from portal.orders.exports import export_orders, export_subscriptions
from portal.orders.models import Order, OrderEvent, Subscription


class OrderEventInline(admin.TabularInline):
    model = OrderEvent
    extra = 0
    can_delete = False
    readonly_fields = ("at", "from_state", "to_state", "actor_label", "message")

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Order)
class OrderAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "organization",
        "project",
        "product",
        "kind",
        "from_quantity",
        "quantity",
        "state",
        "prorata_charge",
        "currency",
        "created_at",
    )
    list_filter = ("state", "kind", "product")
    search_fields = ("organization__name", "project__namespace", "idempotency_key")
    date_hierarchy = "created_at"
    inlines = [OrderEventInline]
    actions = ["export_csv"]

    @admin.action(description="Export selected orders as CSV", permissions=["view"])
    def export_csv(self, request, queryset):
        return export_orders(queryset)


@admin.register(Subscription)
class SubscriptionAdmin(ReadOnlyAdmin):
    list_display = ("id", "project", "product", "quantity", "updated_at")
    list_filter = ("product",)
    search_fields = ("project__namespace", "project__organization__name")
    actions = ["export_csv"]

    @admin.action(description="Export selected subscriptions as CSV", permissions=["view"])
    def export_csv(self, request, queryset):
        return export_subscriptions(queryset)
