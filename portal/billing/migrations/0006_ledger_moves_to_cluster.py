"""The claim ledger moves to `portal.cluster` (observed state): its tables are renamed, every
record kept as it was (ids, times, sources); the models leave billing's state."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("billing", "0005_ledger_estimated_times_and_checkpoint")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.AlterModelTable("usagerecord", "cluster_usagerecord"),
                migrations.AlterModelTable("meteringcheckpoint", "cluster_meteringcheckpoint"),
            ],
            state_operations=[
                migrations.DeleteModel("UsageRecord"),
                migrations.DeleteModel("MeteringCheckpoint"),
            ],
        )
    ]
