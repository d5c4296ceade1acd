"""Staff admin of the catalogue: GPU models and products with prices, editable by billing;
every change is in the AuditLog with its values before and after."""

from __future__ import annotations

from django.contrib import admin

from portal.audit.audited_admin import AuditedAdmin
from portal.catalog.models import GpuModel, Product


@admin.register(GpuModel)
class GpuModelAdmin(AuditedAdmin):
    list_display = ("name", "short_name", "memory_mib", "compute_capability", "architecture")


@admin.register(Product)
class ProductAdmin(AuditedAdmin):
    list_display = (
        "name",
        "device_class",
        "gpu_model",
        "memory_mib",
        "compute_percent",
        "monthly_price",
        "currency",
        "sellable",
    )
    list_editable = ("monthly_price", "sellable")
    list_filter = ("sellable", "gpu_model")
    search_fields = ("name", "device_class")

    def get_readonly_fields(self, request, obj=None):
        # The DeviceClass name is what the cluster and existing quotas refer to: fixed once sold.
        return ("device_class",) if obj is not None else ()

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
