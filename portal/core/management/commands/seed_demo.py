"""Seed the demo: a staff login for the admin. Idempotent; prints the demo login.

Apps add their own demo data through `portal.core.seeding.SEEDERS` so this command stays the one
entry point `make run` calls.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from portal.core import seeding


class Command(BaseCommand):
    help = "Create the demo logins and catalogue (idempotent)."

    def handle(self, *args, **options) -> None:
        pw_file = settings.STATE_DIR / "secrets" / "demo-password"
        pw_file.parent.mkdir(parents=True, exist_ok=True)
        if not pw_file.exists():
            pw_file.write_text(secrets.token_urlsafe(12))
            pw_file.chmod(0o600)
        password = pw_file.read_text().strip()
        user_model = get_user_model()
        admin, created = user_model.objects.get_or_create(
            username="admin", defaults={"email": "admin@tranche.local"}
        )
        if created or not admin.check_password(password):
            admin.is_staff = admin.is_superuser = True
            admin.set_password(password)
            admin.save()
        lines = [f"Demo admin login: admin / {password}  (password kept in {pw_file})"]
        for seeder in seeding.SEEDERS:
            lines.extend(seeder(password))
        self.stdout.write("\n".join(lines))
