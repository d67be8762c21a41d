"""The Django admin: queue configuration, API tokens, request history,
periodic requests, users; one module each (Django's admin autodiscovery
imports this package, which imports them).

Saving a Queue pushes its configuration to Redis (core/signals.py), which is
what running workers read, so a change here reaches them without a restart.
The forms refuse to save while Redis is unreachable, so the database and
the workers never silently disagree. Changes to the queue itself (pausing a
queue, running a periodic request now, pausing one) go through
core/operations.py, as the dashboard's do.
"""
from django.contrib import admin

from queueadmin.core.admin import queues, requests, tokens  # noqa: F401  (each registers its models)

admin.site.site_header = "queueadmin administration"
admin.site.site_title = "queueadmin admin"
admin.site.index_title = "Queues, tokens and users"
