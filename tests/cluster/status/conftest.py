"""The controller tier's fixtures (tenants with orders, fake GPU nodes) for the status tests."""

from tests.cluster.controller.conftest import (  # noqa: F401 - fixtures by name
    applier,
    controller_settings,
    make_tenant,
    tenant,
)
