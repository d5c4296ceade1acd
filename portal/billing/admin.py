"""Billing staff's admin: everything about one organization on one page, invoice actions that
call `billing.services`, and the utilisation report per GPU model. Nothing here writes money
itself: each action is one service call (one transaction, one audit row)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from portal.audit.models import AuditLog
from portal.billing import accounts, reports, selectors, services
from portal.billing.focus import focus_csv
from portal.billing.models import BillingAccount, CreditNote, Invoice
from portal.cluster.models import UsageRecord
from portal.core.admin import ReadOnlyAdmin
from portal.orders.models import Order, Subscription
from portal.tenants.errors import ServiceError
from portal.tenants.models import Membership, Organization, Project
from tranche import money, pricing


class BillingAccountForm(forms.ModelForm):
    """The account form; a currency change that would relabel billed amounts is a form error."""

    class Meta:
        model = BillingAccount
        fields = ("legal_name", "address", "vat_id", "email", "currency", "tax_rate_percent")

    def clean_currency(self) -> str:
        currency = self.cleaned_data["currency"]
        refusal = accounts.currency_change_refusal(self.instance, currency)
        if refusal:
            raise forms.ValidationError(refusal)
        return currency


def parse_month(year: str | None, month: str | None) -> tuple[int, int]:
    """A (year, month) from query text, or a ServiceError saying what is wrong with it."""
    now = timezone.now()
    try:
        y = int(year) if year not in (None, "") else now.year
        m = int(month) if month not in (None, "") else now.month
    except ValueError:
        raise ServiceError("Year and month must be numbers (e.g. 2026 and 11).") from None
    if not 1 <= m <= 12 or not 2000 <= y <= 9999:
        raise ServiceError(
            f"There is no month {y}-{m}: the month is 1 to 12, the year 2000 or later."
        )
    return y, m


@admin.register(BillingAccount)
class BillingAccountAdmin(admin.ModelAdmin):
    form = BillingAccountForm
    list_display = ("organization", "legal_name", "currency", "tax_rate_percent", "vat_id")
    search_fields = ("organization__name", "legal_name", "vat_id")
    readonly_fields = ("organization",)

    def has_add_permission(self, request) -> bool:
        return False  # created with the first invoice; edited here

    def save_model(self, request, obj, form, change) -> None:
        accounts.update_billing_account(obj, request.user, form.changed_data)


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = (
        "claim_name",
        "organization",
        "project",
        "product",
        "node",
        "device",
        "allocated_at",
        "released_at",
        "opened_by",
        "closed_by",
        "times_estimated",
    )
    list_filter = ("product", "opened_by", "closed_by", "times_estimated")
    search_fields = ("claim_name", "claim_uid", "organization__name", "node")
    date_hierarchy = "allocated_at"


@admin.register(CreditNote)
class CreditNoteAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "invoice", "reason", "total", "currency", "issued_at", "issued_by")
    search_fields = ("invoice__organization__name", "reason")


@admin.register(Invoice)
class InvoiceAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "organization_link", "year", "month", "state", "total", "currency")
    list_filter = ("state", "year", "month")
    search_fields = ("organization__name", "organization__slug")
    actions = ["issue", "mark_paid"]

    @admin.display(description="Organization")
    def organization_link(self, obj: Invoice) -> str:
        from django.utils.html import format_html

        url = reverse("admin:billing_organization", args=[obj.organization_id])
        return format_html('<a href="{}">{}</a>', url, obj.organization)

    def get_actions(self, request):
        actions = super().get_actions(request)
        if not request.user.has_perm("billing.change_invoice"):
            actions.pop("issue", None)
            actions.pop("mark_paid", None)
        return actions

    def _each(self, request, queryset, call, verb: str) -> None:
        done = 0
        for invoice in queryset:
            try:
                call(invoice, request.user)
                done += 1
            except ServiceError as exc:
                self.message_user(request, str(exc), messages.ERROR)
        self.message_user(request, f"{verb} {done} invoice(s).")

    @admin.action(description="Issue selected drafts (numbers them)")
    def issue(self, request, queryset) -> None:
        self._each(
            request, queryset.filter(state=Invoice.State.DRAFT), services.issue_invoice, "Issued"
        )

    @admin.action(description="Mark selected issued invoices paid")
    def mark_paid(self, request, queryset) -> None:
        self._each(request, queryset, services.mark_paid, "Marked paid")

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "organization/<int:organization_id>/",
                view(self.organization_view),
                name="billing_organization",
            ),
            path("utilisation/", view(self.utilisation_view), name="billing_utilisation"),
            path("focus/", view(self.focus_view), name="billing_focus"),
            path("issue/", view(self.issue_view), name="billing_issue"),
            *super().get_urls(),
        ]

    # -- the organization page --------------------------------------------------------------
    def organization_view(self, request: HttpRequest, organization_id: int) -> HttpResponse:
        if not request.user.has_perm("billing.view_invoice"):
            raise PermissionDenied
        org = get_object_or_404(Organization, pk=organization_id)
        if request.method == "POST":
            return self._organization_action(request, org)
        invoices = Invoice.objects.filter(organization=org).prefetch_related("credit_notes")
        now = timezone.now()
        year, month = pricing.month_of(now)
        month_lines = selectors.month_to_date(org, now)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Billing: {org.name}",
            "org": org,
            "account": accounts.billing_account(org),
            "members": Membership.objects.filter(organization=org).select_related("user"),
            "projects": Project.objects.filter(organization=org),
            "subscriptions": Subscription.objects.filter(
                project__organization=org, quantity__gt=0
            ).select_related("project", "product"),
            "orders": Order.objects.filter(organization=org).select_related("product", "project")[
                :50
            ],
            "month_lines": month_lines,
            "cost_so_far": money.total(line.cost_so_far for line in month_lines),
            "usage": UsageRecord.objects.filter(organization=org).select_related("product")[:50],
            "slice_seconds": selectors.slice_seconds(
                org, pricing.month_start(year, month), pricing.month_end(year, month), now
            ),
            "invoices": invoices,
            "credit_notes": CreditNote.objects.filter(invoice__organization=org),
            "audit": AuditLog.objects.filter(organization_id=org.pk)[:50],
            "can_change": request.user.has_perm("billing.change_invoice"),
        }
        return TemplateResponse(request, "admin/billing/organization.html", context)

    def _organization_action(self, request: HttpRequest, org: Organization) -> HttpResponse:
        if not request.user.has_perm("billing.change_invoice"):
            raise PermissionDenied
        invoice = get_object_or_404(Invoice, pk=request.POST.get("invoice"), organization=org)
        action = request.POST.get("action")
        reason = request.POST.get("reason", "")
        try:
            if action == "issue":
                services.issue_invoice(invoice, request.user)
            elif action == "paid":
                services.mark_paid(invoice, request.user)
            elif action == "void":
                services.void_invoice(invoice, request.user, reason)
            elif action == "credit":
                amount = services.credit_amount(request.POST.get("amount", ""))
                note = services.issue_credit_note(invoice, request.user, amount, reason)
                messages.success(request, f"Credit note {note} issued against {invoice}.")
            else:
                raise ServiceError(f"Unknown action {action!r}: use the buttons on this page.")
            if action != "credit":
                messages.success(request, f"Invoice {invoice}: {action} done.")
        except ServiceError as exc:
            messages.error(request, str(exc))
        return HttpResponseRedirect(reverse("admin:billing_organization", args=[org.pk]))

    def focus_view(self, request: HttpRequest) -> HttpResponse:
        """Platform-wide FOCUS 1.2 CSV of one month (?year=&month=); a bad month is a 400 that
        says so (never another month's file)."""
        if not request.user.has_perm("billing.view_invoice"):
            raise PermissionDenied
        try:
            year, month = parse_month(request.GET.get("year"), request.GET.get("month"))
        except ServiceError as exc:
            return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
        response = HttpResponse(focus_csv(year, month), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="focus-{year}-{month:02d}.csv"'
        return response

    def _month(self, request: HttpRequest) -> tuple[int, int]:
        now = timezone.now()
        try:
            year = int(request.GET.get("year", now.year))
            month = int(request.GET.get("month", now.month))
            pricing.month_start(year, month)
        except ValueError:
            messages.error(request, "Year and month must be numbers (e.g. 2026 and 11).")
            return now.year, now.month
        return year, month

    # -- issue an invoice for an ended month, after a preview ------------------------------------
    def issue_view(self, request: HttpRequest) -> HttpResponse:
        """Staff pick an organization and an ended month, see the lines it would bill, then
        issue it (`services.generate_invoice`: idempotent, refuses a month not ended)."""
        if not request.user.has_perm("billing.change_invoice"):
            raise PermissionDenied
        data = request.POST if request.method == "POST" else request.GET
        context = {
            **self.admin_site.each_context(request),
            "title": "Issue an invoice for an ended month",
            "organizations": Organization.objects.order_by("name"),
            "chosen": data.get("organization", ""),
            "year": data.get("year", ""),
            "month": data.get("month", ""),
        }
        if data.get("organization"):
            try:
                org = Organization.objects.filter(pk=int(data["organization"])).first()
                if org is None:
                    raise ServiceError("Choose an organization from the list.")
                year, month = parse_month(data.get("year"), data.get("month"))
                services.check_month_ended(year, month)
                if request.method == "POST":
                    invoice, created = services.generate_invoice(
                        org, year, month, actor=request.user
                    )
                    if invoice is None:
                        raise ServiceError(
                            f"{org} held nothing in {year}-{month:02d}: there is nothing to bill."
                        )
                    verb = "issued" if created else "already existed"
                    messages.success(request, f"Invoice {invoice} for {year}-{month:02d} {verb}.")
                    return HttpResponseRedirect(
                        reverse("admin:billing_organization", args=[org.pk])
                    )
                lines = services.preview_lines(org, year, month)
                net = money.total(line.amount for line in lines)
                rate = selectors.account_terms(org)[0]
                context.update(
                    org=org,
                    lines=lines,
                    net=net,
                    tax=money.tax_of(net, rate),
                    total=net + money.tax_of(net, rate),
                    tax_rate=rate,
                    existing=Invoice.objects.filter(organization=org, year=year, month=month),
                )
            except ServiceError as exc:
                messages.error(request, str(exc))
        return TemplateResponse(request, "admin/billing/issue.html", context)

    # -- utilisation report -------------------------------------------------------------------
    def utilisation_view(self, request: HttpRequest) -> HttpResponse:
        if not request.user.has_perm("cluster.view_usagerecord"):
            raise PermissionDenied
        now = timezone.now()
        year, month = self._month(request)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Utilisation per GPU model, {year}-{month:02d}",
            "rows": reports.utilisation_by_model(year, month, now),
            "year": year,
            "month": month,
        }
        return TemplateResponse(request, "admin/billing/utilisation.html", context)


from portal.billing import sla_admin  # noqa: E402,F401  (registers the SLA pages)
