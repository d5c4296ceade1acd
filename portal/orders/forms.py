"""Order forms: the choice (product + target quantity), the confirmation (plus one-time key)."""

from __future__ import annotations

from django import forms
from django.core.validators import RegexValidator

from portal.catalog.models import Product
from portal.catalog.selectors import find_product
from portal.orders.models import MAX_SLICES_PER_PRODUCT

QUANTITY_ERRORS = {
    "required": "Enter how many slices the project should hold (0 cancels).",
    "invalid": "Quantity must be a whole number, for example 2.",
    "min_value": "Quantity cannot be negative; use 0 to cancel.",
    "max_value": f"At most {MAX_SLICES_PER_PRODUCT} slices per product; contact sales for more.",
}
PRODUCT_ERRORS = {
    "required": "Choose a product from the catalogue.",
    "invalid": "Product must be chosen from the list.",
    "min_value": "Product must be chosen from the list.",
    "max_value": "Product must be chosen from the list.",
}


STALE_MESSAGE = (
    "This confirmation is incomplete (the page may be from an older version). "
    "Reload the order page and confirm again."
)
STALE_CONFIRMATION = dict.fromkeys(
    ("required", "invalid", "min_value", "max_value", "max_digits", "max_decimal_places"),
    STALE_MESSAGE,
)
CONFIRMED_FIELDS = ("confirmed_from", "confirmed_version", "confirmed_charge", "confirmed_tax")


class OrderForm(forms.Form):
    product = forms.IntegerField(min_value=1, max_value=2**62, error_messages=PRODUCT_ERRORS)
    quantity = forms.IntegerField(
        min_value=0,
        max_value=MAX_SLICES_PER_PRODUCT,
        error_messages=QUANTITY_ERRORS,
        help_text=f"Slices the project may hold at once, 0 to {MAX_SLICES_PER_PRODUCT}; 0 cancels.",
    )

    def clean_product(self) -> Product:
        product = find_product(self.cleaned_data["product"])
        if product is None:
            raise forms.ValidationError(
                "This product does not exist (it may have been removed). Choose one from the list."
            )
        return product


class ConfirmOrderForm(OrderForm):
    """The confirmation page's form: the choice, a one-time key, and the quote the tenant saw
    (from-quantity, subscription version, charge); the order is placed only if it still holds."""

    idempotency_key = forms.CharField(
        max_length=64,
        validators=[RegexValidator(r"^[A-Za-z0-9_-]+$")],
        error_messages={
            "required": "The confirmation key is missing. Reload the order page and confirm again.",
            "max_length": "The confirmation key is malformed. Reload the order page.",
            "invalid": "The confirmation key is malformed. Reload the order page.",
        },
    )
    confirmed_from = forms.IntegerField(
        min_value=0, max_value=MAX_SLICES_PER_PRODUCT, error_messages=STALE_CONFIRMATION
    )
    confirmed_version = forms.IntegerField(
        min_value=0, max_value=2**31 - 1, error_messages=STALE_CONFIRMATION
    )
    # negative for a decrease or cancel: the credit the invoice will carry (docs/billing.md)
    confirmed_charge = forms.DecimalField(
        max_digits=12, decimal_places=2, error_messages=STALE_CONFIRMATION
    )
    # the tax the page showed on top of the charge (the order is placed only if it still holds)
    confirmed_tax = forms.DecimalField(
        max_digits=12, decimal_places=2, required=False, error_messages=STALE_CONFIRMATION
    )

    def clean(self) -> dict:
        data = super().clean()
        stale = [name for name in CONFIRMED_FIELDS if name in self._errors]
        for name in stale:  # one message for the whole quote, not three cryptic ones
            del self._errors[name]
        if stale:
            raise forms.ValidationError(STALE_MESSAGE)
        return data
