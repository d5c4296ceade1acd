"""App config of the catalogue; registers the catalogue seeder."""

from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "portal.catalog"
    label = "catalog"
    verbose_name = "Catalogue"

    def ready(self) -> None:
        from portal.catalog import seed  # noqa: F401  (registers the catalogue seeder)
