"""App config of the billing-staff tooling; gives the order quotes their tax terms."""

from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "portal.billing"
    label = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        from portal.billing import selectors
        from portal.catalog.taxes import register_tax_source

        register_tax_source(selectors.TAX_SOURCE)
