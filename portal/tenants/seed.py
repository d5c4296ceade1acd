"""Demo tenant: user `demo` owning organization "Demo Lab" with project "inference"."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from portal.core.seeding import seeder
from portal.tenants.services import sign_up


@seeder
def seed_demo_tenant(password: str) -> list[str]:
    """Create the demo tenant once (idempotent)."""
    if not get_user_model().objects.filter(username="demo").exists():
        sign_up(
            username="demo",
            email="demo@tranche.local",
            password=password,
            organization_name="Demo Lab",
            project_name="inference",
        )
    return [f"Demo tenant login: demo / {password}"]
