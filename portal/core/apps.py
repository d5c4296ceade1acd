from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "portal.core"
    label = "core"
    verbose_name = "Platform health"

    def ready(self) -> None:
        from portal.core import signals  # noqa: F401  (connects the logout receiver)
