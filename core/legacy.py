"""Databases made before queueadmin was a package, when its app's label was
`core`: their tables are `core_*` and their migrations are recorded under
`core`. `adopt_core_tables()` renames them to the `queueadmin` label once,
before `migrate` runs (the standalone service calls it), so an existing
installation keeps its queues, tokens, history and permissions."""
from __future__ import annotations

import logging

from django.apps import apps
from django.db import connection

log = logging.getLogger("queueadmin")
TABLES = ("queue", "apitoken", "requestrecord", "periodicrequest")


def adopt_core_tables() -> bool:
    """Rename core_* tables to queueadmin_* when this database has the old
    layout and no app of the project uses the `core` label; True if it did."""
    if apps.is_installed("core") or any(c.label == "core" for c in apps.get_app_configs()):
        return False  # a project's own `core` app owns those names
    existing = set(connection.introspection.table_names())
    old = [t for t in TABLES if f"core_{t}" in existing]
    if not old or any(f"queueadmin_{t}" in existing for t in TABLES):
        return False
    with connection.schema_editor() as editor:  # one transaction (atomic) where the database allows
        for name in old:
            editor.alter_db_table(None, f"core_{name}", f"queueadmin_{name}")
        with connection.cursor() as cursor:
            cursor.execute("UPDATE django_migrations SET app = 'queueadmin' WHERE app = 'core'")
            if "django_content_type" in existing:
                cursor.execute("UPDATE django_content_type SET app_label = 'queueadmin' WHERE app_label = 'core'")
    log.info("renamed the tables of the app's former label core to queueadmin: %s", ", ".join(old))
    return True
