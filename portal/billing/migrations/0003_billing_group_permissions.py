"""Billing staff change invoices (through the admin's service actions) and accounts; Support views."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

VIEW = ["usagerecord", "billingaccount", "invoice", "invoiceline", "creditnote"]
BILLING_CHANGE = ["change_invoice", "change_billingaccount"]


def grant(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    views = list(
        Permission.objects.filter(
            content_type__app_label="billing", codename__in=[f"view_{m}" for m in VIEW]
        )
    )
    changes = list(
        Permission.objects.filter(content_type__app_label="billing", codename__in=BILLING_CHANGE)
    )
    for name, perms in (("Support", views), ("Billing", views + changes)):
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(*perms)


def revoke(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    perms = Permission.objects.filter(content_type__app_label="billing")
    for group in apps.get_model("auth", "Group").objects.filter(name__in=["Billing", "Support"]):
        group.permissions.remove(*perms)


class Migration(migrations.Migration):
    dependencies = [("billing", "0002_ledger_invoices_credit_notes")]

    operations = [migrations.RunPython(grant, revoke)]
