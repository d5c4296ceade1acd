"""CPU/RAM used is observed state (`portal.cluster.QuotaUse`, filled again at the watcher's next
relist); `usage_reported_at` goes with it (the QuotaUse row's presence says the same)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("tenants", "0003_project_deleted_at")]

    operations = [
        migrations.RemoveField("project", "cpu_used_millicores"),
        migrations.RemoveField("project", "memory_used_mib"),
        migrations.RemoveField("project", "usage_reported_at"),
    ]
