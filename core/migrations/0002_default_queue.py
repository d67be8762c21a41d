from django.db import migrations


def create_default(apps, schema_editor):
    apps.get_model("queueadmin", "Queue").objects.get_or_create(name="default")


class Migration(migrations.Migration):
    dependencies = [("queueadmin", "0001_initial")]
    operations = [migrations.RunPython(create_default, migrations.RunPython.noop)]
