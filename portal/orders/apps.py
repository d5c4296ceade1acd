"""App config of the orders app."""

from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "portal.orders"
    label = "orders"
    verbose_name = "Orders and subscriptions"

    def ready(self) -> None:
        from portal.core.health import CONTROLLER_ROW_CHECKS
        from portal.orders.backlog import check_backlog

        CONTROLLER_ROW_CHECKS["backlog"] = check_backlog
