"""Create the "Billing" and "Support" staff groups with their model permissions.

Billing: manage money and entitlement (products, prices, organization suspension through admin
actions; orders and subscriptions are read-only and change only through services); no permission
on users, so no password changes. Support: view only.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

VIEW_ONLY = [
    ("tenants", "organization"),
    ("tenants", "membership"),
    ("tenants", "project"),
    ("tenants", "invitation"),
    ("catalog", "gpumodel"),
    ("catalog", "product"),
    ("orders", "subscription"),
    ("orders", "order"),
    ("orders", "orderevent"),
    # ("orders", "projectusage") moved to portal.cluster: cluster.0002 grants its view
    ("audit", "auditlog"),
]
BILLING_EXTRA = [
    ("catalog", "add_gpumodel"),
    ("catalog", "change_gpumodel"),
    ("catalog", "add_product"),
    ("catalog", "change_product"),
    ("tenants", "change_organization"),
]


def create_groups(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")

    def perm(app_label, codename):
        return Permission.objects.get(content_type__app_label=app_label, codename=codename)

    views = [perm(app, f"view_{model}") for app, model in VIEW_ONLY]
    support, _ = Group.objects.get_or_create(name="Support")
    support.permissions.set(views)
    billing, _ = Group.objects.get_or_create(name="Billing")
    billing.permissions.set(views + [perm(app, code) for app, code in BILLING_EXTRA])


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=["Billing", "Support"]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("tenants", "0001_initial"),
        ("catalog", "0001_initial"),
        ("orders", "0001_initial"),
        ("audit", "0001_initial"),
    ]

    operations = [migrations.RunPython(create_groups, remove_groups)]
