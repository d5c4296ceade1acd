"""Invitations keep only their token's SHA-256 and expire (issue #14, item 1).

Existing open invitations keep working: their plaintext token is hashed in place, and they expire
7 days after they were created (already older ones are expired at once).
"""

import hashlib
from datetime import timedelta

from django.db import migrations, models


def hash_existing(apps, schema_editor):
    Invitation = apps.get_model("tenants", "Invitation")
    for invitation in Invitation.objects.all():
        invitation.token_hash = hashlib.sha256(invitation.token.encode()).hexdigest()
        invitation.expires_at = invitation.created_at + timedelta(days=7)
        invitation.save(update_fields=["token_hash", "expires_at"])


class Migration(migrations.Migration):
    dependencies = [("tenants", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="invitation",
            name="token_hash",
            field=models.CharField(editable=False, max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="invitation",
            name="expires_at",
            field=models.DateTimeField(null=True),
        ),
        migrations.RunPython(hash_existing, migrations.RunPython.noop),
        migrations.RemoveField(model_name="invitation", name="token"),
        migrations.AlterField(
            model_name="invitation",
            name="token_hash",
            field=models.CharField(editable=False, max_length=64, unique=True),
        ),
        migrations.AlterField(
            model_name="invitation",
            name="expires_at",
            field=models.DateTimeField(),
        ),
    ]
