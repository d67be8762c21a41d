# A per-token secret that signs the webhooks of the requests a token submits.
# Tokens issued before it have none (they were shown once, so a secret made now
# could never be shown): a callback_url from them is refused.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('queueadmin', '0005_periodicrequest'),
    ]

    operations = [
        migrations.AddField(
            model_name='apitoken',
            name='webhook_secret',
            field=models.CharField(blank=True, editable=False, max_length=64),
        ),
    ]
