# Scopes, expiry and revocation for API tokens. Tokens made before scopes
# existed get "read submit steer", so today's clients keep working.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('queueadmin', '0003_queue_time_limit'),
    ]

    operations = [
        migrations.AddField(
            model_name='apitoken',
            name='expires_at',
            field=models.DateTimeField(blank=True, help_text='Refused from then on (empty: never expires).', null=True),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='revoked_at',
            field=models.DateTimeField(blank=True, help_text='Refused from then on.', null=True),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='scopes',
            field=models.CharField(default='read submit steer', help_text='What the token may do (see core.auth.SCOPES).', max_length=64),
            preserve_default=False,
        ),
    ]
