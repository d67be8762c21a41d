"""The index on (state, finished_at) that pruning the request history by age
uses (core/retention.py). On PostgreSQL it is built CONCURRENTLY, so adding
it to a history of millions of rows does not block the workers' history
writes meanwhile (hence a non-atomic migration); elsewhere as usual."""

from django.db import migrations, models


class AddIndexConcurrentlyOnPostgres(migrations.AddIndex):
    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.add_index(model, self.index, concurrently=True)
        else:
            schema_editor.add_index(model, self.index)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        model = from_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.remove_index(model, self.index, concurrently=True)
        else:
            schema_editor.remove_index(model, self.index)


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ('queueadmin', '0010_queue_encrypt'),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name='requestrecord',
            index=models.Index(fields=['state', 'finished_at'], name='queueadmin_hist_state_fin'),
        ),
    ]
