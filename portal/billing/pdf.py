"""PDF of a rendered invoice or credit note, by WeasyPrint (pure Python + the system's Pango).

The HTML is the same page tenants print, so the PDF and the printout never differ; WeasyPrint
applies the page's `@media print` rules (A4, margins)."""

from __future__ import annotations


class PdfUnavailableError(RuntimeError):
    """This installation cannot render PDFs (WeasyPrint or the system's Pango is missing)."""


def html_to_pdf(html: str, base_url: str) -> bytes:
    try:
        import weasyprint  # imported on use: it loads Pango, which only the PDF path needs
    except (ImportError, OSError) as exc:  # OSError: cannot load libpango / libgobject
        raise PdfUnavailableError(str(exc)) from exc
    return weasyprint.HTML(string=html, base_url=base_url, media_type="print").write_pdf()
