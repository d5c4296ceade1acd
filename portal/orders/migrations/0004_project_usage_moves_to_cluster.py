"""Slice usage is observed state: `portal.cluster.ProjectUsage` holds it (filled again at the
watcher's next relist), so the orders app's table goes."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("orders", "0003_order_tax_and_priced_at")]

    operations = [migrations.DeleteModel("ProjectUsage")]
