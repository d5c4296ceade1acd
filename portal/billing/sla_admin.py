"""Billing staff's SLA pages in the admin: each product's SLA (target and credit schedule),
validated as a whole (`tranche.sla.schedule_errors`, errors in words staff can act on) and
audited on every change; and the outages the month run credits, beside the credit they gave."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import admin
from django.db import transaction

from portal.audit.services import record_audit
from portal.billing.models import InvoiceLine, ProductSla, SlaCreditTier
from portal.billing.sla_lines import KIND
from portal.cluster.models import SliceOutage
from portal.core.admin import GuardedAdmin, ReadOnlyAdmin
from tranche import sla as rule


class TierFormSet(forms.BaseInlineFormSet):
    """The schedule is checked whole, against the target typed on the same page."""

    def clean(self) -> None:
        super().clean()
        target = self.instance.target_percent
        if target is None or any(form.errors for form in self.forms):
            return
        tiers = [
            rule.Tier(form.cleaned_data["below_percent"], form.cleaned_data["credit_percent"])
            for form in self.forms
            if form.cleaned_data and not form.cleaned_data.get("DELETE")
        ]
        errors = rule.schedule_errors(Decimal(target), tiers)
        if errors:
            raise forms.ValidationError(errors)


class TierInline(admin.TabularInline):
    model = SlaCreditTier
    formset = TierFormSet
    extra = 1


def snapshot(sla: ProductSla) -> dict:
    """What an audit row keeps of an SLA setting."""
    return {
        "target_percent": str(Decimal(sla.target_percent).quantize(Decimal("0.001"))),
        "tiers": [
            [str(t.below_percent), str(t.credit_percent)]
            for t in SlaCreditTier.objects.filter(sla=sla).order_by("-below_percent")
        ],
    }


@admin.register(ProductSla)
class ProductSlaAdmin(GuardedAdmin):
    list_display = ("product", "target_percent", "schedule", "updated_at")
    inlines = [TierInline]

    @admin.display(description="Credit schedule")
    def schedule(self, obj: ProductSla) -> str:
        return ", ".join(str(t) for t in obj.tiers.all()) or "none"

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        with transaction.atomic():  # the setting, its tiers and the audit row commit together
            return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request, obj, form, change) -> None:
        request._sla_before = snapshot(obj) if change else {}
        if change:  # the target as stored before this form
            request._sla_before["target_percent"] = str(
                ProductSla.objects.get(pk=obj.pk).target_percent
            )
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        record_audit(
            actor=request.user,
            system="billing",
            action="product_sla.change" if change else "product_sla.create",
            obj=form.instance,
            before=getattr(request, "_sla_before", {}),
            after=snapshot(form.instance),
        )


@admin.register(SliceOutage)
class SliceOutageAdmin(ReadOnlyAdmin):
    """Each slice's outage (the GPU failure that began it) beside the credit it was given."""

    list_display = (
        "pod_name",
        "organization",
        "project",
        "product",
        "gpu",
        "xid",
        "started_at",
        "ended_at",
        "replacement_pod",
        "credited",
    )
    list_filter = ("product",)
    search_fields = ("pod_name", "organization__name", "gpu_uuid")
    date_hierarchy = "started_at"

    @admin.display(description="GPU")
    def gpu(self, obj: SliceOutage) -> str:
        return f"{obj.gpu_uuid} on {obj.node}"

    @admin.display(description="XID")
    def xid(self, obj: SliceOutage) -> str:
        return str(obj.xid or "")

    @admin.display(description="SLA credit")
    def credited(self, obj: SliceOutage) -> str:
        lines = InvoiceLine.objects.filter(
            kind=KIND,
            project_id=obj.project_id,
            product_id=obj.product_id,
            period_start__lte=obj.ended_at or obj.started_at,
            period_end__gte=obj.started_at,
        ).exclude(invoice__state="void")
        return ", ".join(f"{line.amount} on {line.invoice}" for line in lines) or "none"
