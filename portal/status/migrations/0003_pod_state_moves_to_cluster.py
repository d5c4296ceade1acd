"""Pod states are observed state: `portal.cluster.PodState` holds them (filled again at the
watcher's next relist), so the status app's table goes."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("status", "0002_pod_events")]

    operations = [migrations.DeleteModel("PodState")]
