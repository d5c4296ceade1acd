"""Forget every cached image scan: before #28 a scan was filed under the digest the registry's
`Docker-Content-Digest` header claimed, so any row may be another registry's scan under a
victim's digest. The cache refills under the sha256 of the bytes received."""

from django.db import migrations


def forget_scans(apps, schema_editor) -> None:
    apps.get_model("preflight", "ImageScan").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("preflight", "0002_api_token_scope_and_expiry")]

    operations = [migrations.RunPython(forget_scans, migrations.RunPython.noop)]
