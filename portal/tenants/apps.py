"""App config of the tenants app; registers the demo-tenant seeder."""

from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "portal.tenants"
    label = "tenants"
    verbose_name = "Tenants"

    def ready(self) -> None:
        from portal.tenants import seed  # noqa: F401  (registers the demo seeder)
