"""Billing staff edit products' SLA settings and view slice outages; Support views outages."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

BILLING = [
    "view_productsla",
    "add_productsla",
    "change_productsla",
    "view_slacredittier",
    "add_slacredittier",
    "change_slacredittier",
    "delete_slacredittier",
    "view_sliceoutage",
]
SUPPORT = ["view_productsla", "view_slacredittier", "view_sliceoutage"]


def grant(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in (("Billing", BILLING), ("Support", SUPPORT)):
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label="billing", codename__in=codenames)
        )


def revoke(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    perms = Permission.objects.filter(content_type__app_label="billing", codename__in=BILLING)
    for group in apps.get_model("auth", "Group").objects.filter(name__in=["Billing", "Support"]):
        group.permissions.remove(*perms)


class Migration(migrations.Migration):
    dependencies = [("billing", "0007_sla_settings_and_slice_outages")]

    operations = [migrations.RunPython(grant, revoke)]
