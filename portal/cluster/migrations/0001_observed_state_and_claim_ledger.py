"""The room for observed state. Pod states, slice usage and CPU/RAM used start empty and fill at
the watcher's next relist (observations, not history); the claim ledger and its checkpoint are
billing's tables renamed by `billing.0006_ledger_moves_to_cluster` (every record kept), so they
enter this app's state only."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('catalog', '0002_drop_product_hourly_price'),
        ('tenants', '0004_quota_use_moves_to_cluster'),
        ('orders', '0004_project_usage_moves_to_cluster'),
        ('status', '0003_pod_state_moves_to_cluster'),
        ('billing', '0006_ledger_moves_to_cluster'),
    ]

    operations = [
        migrations.CreateModel(
            name='QuotaUse',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('cpu_used_millicores', models.PositiveIntegerField()),
                ('memory_used_mib', models.PositiveIntegerField()),
                ('updated_at', models.DateTimeField(auto_now=True, help_text='when a figure last changed')),
                ('project', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='quota_use', to='tenants.project')),
            ],
        ),
        migrations.CreateModel(
            name='PodState',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('namespace', models.CharField(max_length=63)),
                ('name', models.CharField(max_length=253)),
                ('kind', models.CharField(default='Pod', max_length=32)),
                ('phase', models.CharField(max_length=16)),
                ('reason', models.CharField(help_text='reason class (tranche.pod_reasons)', max_length=32)),
                ('words', models.CharField(max_length=600)),
                ('next_step', models.CharField(blank=True, max_length=300)),
                ('events', models.JSONField(blank=True, default=list, help_text="the pod's recent Warning events, oldest first: [time, reason, message]")),
                ('created_at', models.DateTimeField(auto_now_add=True, help_text='first seen by the portal')),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='pod_states', to='tenants.project')),
            ],
            options={
                'ordering': ['namespace', 'name'],
                'constraints': [models.UniqueConstraint(fields=('namespace', 'kind', 'name'), name='one_state_per_pod')],
            },
        ),
        migrations.CreateModel(
            name='ProjectUsage',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('allocated', models.PositiveIntegerField(default=0)),
                ('pending', models.PositiveIntegerField(default=0)),
                ('pending_reason', models.CharField(blank=True, max_length=500)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('product', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, to='catalog.product')),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='usage', to='tenants.project')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('project', 'product'), name='one_usage_per_product')],
            },
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='UsageRecord',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('claim_uid', models.CharField(db_index=True, max_length=64)),
                        ('claim_name', models.CharField(max_length=253)),
                        ('node', models.CharField(blank=True, max_length=253)),
                        ('device', models.CharField(blank=True, help_text='GPU device name on the node', max_length=253)),
                        ('allocated_at', models.DateTimeField(db_index=True)),
                        ('released_at', models.DateTimeField(blank=True, db_index=True, null=True)),
                        ('opened_by', models.CharField(help_text='event or resync', max_length=16)),
                        ('recorded_at', models.DateTimeField(auto_now_add=True)),
                        ('closed_by', models.CharField(blank=True, max_length=16)),
                        ('times_estimated', models.BooleanField(default=False)),
                        ('organization', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenants.organization')),
                        ('product', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='catalog.product')),
                        ('project', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='usage_records', to='tenants.project')),
                    ],
                    options={
                        'ordering': ['-allocated_at', '-id'],
                        'constraints': [models.UniqueConstraint(condition=models.Q(('released_at__isnull', True)), fields=('claim_uid',), name='one_open_usage_per_claim'), models.CheckConstraint(condition=models.Q(('released_at__isnull', True), ('released_at__gte', models.F('allocated_at')), _connector='OR'), name='usage_released_after_allocated')],
                    },
                ),
                migrations.CreateModel(
                    name='MeteringCheckpoint',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('stream', models.CharField(max_length=32, unique=True)),
                        ('resource_version', models.CharField(max_length=64)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                    ],
                ),
            ],
        ),
    ]
