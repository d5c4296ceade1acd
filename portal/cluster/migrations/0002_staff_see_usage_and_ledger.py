"""Support and Billing staff keep seeing slice usage and the claim ledger in the admin, now
that those models live here (their view permissions were orders' and billing's)."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

VIEW = ["view_projectusage", "view_usagerecord"]


def grant(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    Permission = apps.get_model("auth", "Permission")
    perms = list(Permission.objects.filter(content_type__app_label="cluster", codename__in=VIEW))
    for group in apps.get_model("auth", "Group").objects.filter(name__in=["Billing", "Support"]):
        group.permissions.add(*perms)


def revoke(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    perms = Permission.objects.filter(content_type__app_label="cluster")
    for group in apps.get_model("auth", "Group").objects.filter(name__in=["Billing", "Support"]):
        group.permissions.remove(*perms)


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0001_observed_state_and_claim_ledger"),
        ("billing", "0003_billing_group_permissions"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
