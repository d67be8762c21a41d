# The queue setting `encrypt` (core/engine/features/encryption.py).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('queueadmin', '0009_auditentry'),
    ]

    operations = [
        migrations.AddField(
            model_name='queue',
            name='encrypt',
            field=models.BooleanField(default=False, help_text='Encrypt payloads, results, logs and errors in Redis (AES-GCM) with the keys of QUEUEADMIN["ENCRYPTION_KEYS"].'),
        ),
    ]
