"""Billing accounts: who is billed, in which currency, at which tax rate (every write audited).

The currency is fixed once an account has invoices or orders: Tranche never converts amounts,
so a change would relabel them (`currency_change_refusal` says why, the admin shows it).
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from portal.audit.services import record_audit
from portal.billing.models import BillingAccount, Invoice
from portal.orders.models import Order
from portal.tenants.errors import ServiceError
from portal.tenants.models import Organization


def seller_details() -> dict[str, str]:
    return dict(getattr(settings, "BILLING_SELLER", {}))


def billing_account(organization: Organization) -> BillingAccount:
    """The organization's account (created with defaults on first use)."""
    account, _ = BillingAccount.objects.get_or_create(
        organization=organization, defaults={"legal_name": organization.name}
    )
    return account


ACCOUNT_FIELDS = ("legal_name", "address", "vat_id", "email", "currency", "tax_rate_percent")


def currency_change_refusal(account: BillingAccount, currency: str) -> str:
    """Why the account's currency may not become `currency` ("" when it may).

    Amounts are never converted: once an invoice was issued, or an order was priced, in the
    account's currency, changing it would relabel those amounts (170.00 EUR as 170.00 USD)."""
    if not account.pk:
        return ""
    old = BillingAccount.objects.filter(pk=account.pk).values_list("currency", flat=True).first()
    if old is None or old == currency:
        return ""
    org = account.organization_id
    invoiced = Invoice.objects.filter(organization_id=org).exclude(state=Invoice.State.DRAFT)
    ordered = Order.objects.filter(organization_id=org).exclude(currency=currency)
    if invoiced.exists() or ordered.exists():
        return (
            f"The currency stays {old}: this organization already has invoices or orders in "
            f"{old}, and Tranche does not convert amounts (changing it would relabel {old} "
            f"amounts as {currency}). Open a new organization to bill in {currency}."
        )
    return ""


@transaction.atomic
def update_billing_account(account: BillingAccount, actor, changed: list[str]) -> BillingAccount:
    """Save staff's edit of an account with its audit row; issued invoices keep their copies.
    A currency change is refused once the account has invoices or orders (`ServiceError`)."""
    if "currency" in changed:
        refusal = currency_change_refusal(account, account.currency)
        if refusal:
            raise ServiceError(refusal)
    before = BillingAccount.objects.filter(pk=account.pk).values(*ACCOUNT_FIELDS).first() or {}
    account.save()
    record_audit(
        actor=actor,
        action="billing_account.change",
        obj=account,
        organization_id=account.organization_id,
        before={k: str(before.get(k, "")) for k in changed if k in ACCOUNT_FIELDS},
        after={k: str(getattr(account, k)) for k in changed if k in ACCOUNT_FIELDS},
    )
    return account
