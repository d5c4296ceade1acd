"""Tenant billing pages: month to date, invoices and credit notes (printable, downloadable).

Every page is reached through the caller's membership (`get_membership`), so another
organization's documents are a 404, indistinguishable from missing ones."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from portal.billing import selectors
from portal.billing.focus import focus_csv
from portal.billing.pdf import PdfUnavailableError, html_to_pdf
from portal.tenants.context import nav_context
from portal.tenants.selectors import get_membership
from tranche import money


@login_required
def billing(request: HttpRequest, organization_id: int) -> HttpResponse:
    """Month to date per project and product, the cost per hour of what is held now, documents."""
    membership = get_membership(request.user, organization_id)
    org = membership.organization
    now = timezone.now()
    lines = selectors.month_to_date(org, now)
    rate, _ = selectors.account_terms(org)
    cost_so_far = money.total(line.cost_so_far for line in lines)
    projected = money.total(line.projected for line in lines)
    context = {
        "organization": org,
        "now": now,
        "lines": lines,
        "tax_rate": rate,
        "cost_so_far": cost_so_far,
        "cost_so_far_gross": cost_so_far + money.tax_of(cost_so_far, rate),
        "projected": projected,
        "projected_gross": projected + money.tax_of(projected, rate),
        "cost_per_hour_now": money.total(line.cost_per_hour_now for line in lines),
        "currency": lines[0].currency if lines else "",
        "invoices": selectors.invoices_of(org),
        "credit_notes": selectors.credit_notes_of(org),
        **nav_context(request),
    }
    return render(request, "billing/billing.html", context)


def _document(request, template: str, context: dict, name: str) -> HttpResponse:
    """The document as HTML, as a downloaded HTML file (?download=1) or as PDF (?format=pdf)."""
    response = render(request, template, context)
    if request.GET.get("format") == "pdf":
        try:
            pdf = html_to_pdf(response.content.decode(), request.build_absolute_uri("/"))
        except PdfUnavailableError:
            # e.g. an image built without Pango: say so and point at what still works
            return HttpResponse(
                "PDF rendering is not available on this installation. Open the document and use "
                "your browser's Print → Save as PDF, or download it as HTML (?download=1); both "
                "carry the same content as the PDF.",
                status=503,
                content_type="text/plain; charset=utf-8",
            )
        response = HttpResponse(pdf, content_type="application/pdf")
        response["Content-Disposition"] = f'attachment; filename="{name}.pdf"'
    elif request.GET.get("download"):
        response["Content-Disposition"] = f'attachment; filename="{name}.html"'
    return response


@login_required
def invoice(request: HttpRequest, organization_id: int, invoice_id: int) -> HttpResponse:
    """The printable invoice (?download=1 to save it as a file)."""
    org = get_membership(request.user, organization_id).organization
    doc = selectors.get_invoice(org, invoice_id)
    context = {"invoice": doc, "lines": doc.lines.select_related("product", "project")}
    return _document(request, "billing/invoice.html", context, str(doc))


@login_required
def credit_note(request: HttpRequest, organization_id: int, note_id: int) -> HttpResponse:
    """The printable credit note (?download=1 to save it as a file)."""
    org = get_membership(request.user, organization_id).organization
    note = selectors.get_credit_note(org, note_id)
    return _document(request, "billing/credit_note.html", {"note": note}, str(note))


@login_required
def focus_export(request: HttpRequest, organization_id: int, year: int, month: int) -> HttpResponse:
    """The organization's FOCUS 1.2 CSV of one month's issued invoices and credit notes."""
    org = get_membership(request.user, organization_id).organization
    if not 1 <= month <= 12:
        raise Http404("No such month.")
    response = HttpResponse(focus_csv(year, month, org), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = (
        f'attachment; filename="focus-{org.slug}-{year}-{month:02d}.csv"'
    )
    return response
