from django.db import migrations


def create_default(apps, schema_editor):
    apps.get_model("core", "Queue").objects.get_or_create(name="default")


class Migration(migrations.Migration):
    dependencies = [("core", "0001_initial")]
    operations = [migrations.RunPython(create_default, migrations.RunPython.noop)]
