# Periodic requests (core/periodic.py): a cron expression or an interval that
# submits an ordinary request at each due time.

import django.core.validators
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('queueadmin', '0004_apitoken_scopes'),
    ]

    operations = [
        migrations.CreateModel(
            name='PeriodicRequest',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=64, unique=True, validators=[django.core.validators.RegexValidator('^[A-Za-z0-9._-]+$', "letters, digits, '.', '_' or '-'")])),
                ('processor', models.CharField(max_length=100)),
                ('items', models.TextField(help_text="One item per line (each line a JSON value if 'items are JSON').")),
                ('items_are_json', models.BooleanField(default=False)),
                ('priority', models.PositiveSmallIntegerField(blank=True, help_text="0-99; empty: the queue's default.", null=True, validators=[django.core.validators.MaxValueValidator(99)])),
                ('concurrency', models.PositiveIntegerField(blank=True, help_text="Empty: the queue's default.", null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(10000)])),
                ('time_limit_seconds', models.FloatField(blank=True, help_text="Per item (0 = none); empty: the queue's.", null=True, validators=[django.core.validators.MinValueValidator(0)])),
                ('cron', models.CharField(blank=True, help_text="e.g. '0 3 * * *' (03:00 daily), 6 fields for seconds ('*/10 * * * * *').", max_length=100)),
                ('interval_seconds', models.PositiveIntegerField(blank=True, help_text='Instead of cron: every N seconds, counted from the Unix epoch (60 fires on the minute).', null=True, validators=[django.core.validators.MinValueValidator(1)])),
                ('timezone', models.CharField(default='UTC', help_text="The cron expression's time zone.", max_length=64)),
                ('enabled', models.BooleanField(default=True)),
                ('catch_up', models.CharField(choices=[('once', 'once: one request for all missed times'), ('skip', 'skip: none for missed times')], default='once', help_text='After downtime with no worker running.', max_length=8)),
                ('last_run_at', models.DateTimeField(blank=True, editable=False, null=True)),
                ('last_request_id', models.CharField(blank=True, editable=False, max_length=32)),
                ('next_run_at', models.DateTimeField(blank=True, editable=False, null=True)),
                ('queue', models.ForeignKey(db_column='queue', on_delete=django.db.models.deletion.PROTECT, related_name='periodic_requests', to='queueadmin.queue', to_field='name')),
            ],
            options={
                'ordering': ['name'],
            },
        ),
    ]
