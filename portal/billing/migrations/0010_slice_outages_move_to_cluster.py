"""Slice outages are the cluster's observations (`cluster.SliceOutage`): each billing outage is
copied there with its GPU, node and XID (from the health event that opened it, which the
cluster's row no longer links to), staff keep seeing them, and billing's table goes."""

from django.contrib.auth.management import create_permissions
from django.db import migrations


def move(apps, schema_editor):
    Old = apps.get_model("billing", "SliceOutage")
    New = apps.get_model("cluster", "SliceOutage")
    New.objects.bulk_create(
        New(
            usage_record_id=o.usage_record_id,
            organization_id=o.organization_id,
            project_id=o.project_id,
            product_id=o.product_id,
            pod_name=o.pod_name,
            node=o.health_event.node_name,
            gpu_uuid=o.health_event.gpu_uuid,
            xid=o.health_event.xid,
            started_at=o.started_at,
            ended_at=o.ended_at,
            replacement_pod=o.replacement_pod,
        )
        for o in Old.objects.select_related("health_event").order_by("pk")
    )
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    Permission = apps.get_model("auth", "Permission")
    view = Permission.objects.filter(content_type__app_label="cluster", codename="view_sliceoutage")
    for group in apps.get_model("auth", "Group").objects.filter(name__in=["Billing", "Support"]):
        group.permissions.add(*view)
    Permission.objects.filter(
        content_type__app_label="billing", content_type__model="sliceoutage"
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0009_outage_belongs_to_the_claim"),
        ("cluster", "0004_slice_outages_are_observations"),
        ("agents", "0007_podslicestatus_idle_seconds"),
    ]

    operations = [
        migrations.RunPython(move, migrations.RunPython.noop),
        migrations.DeleteModel(name="SliceOutage"),
    ]
