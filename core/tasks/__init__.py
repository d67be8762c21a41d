"""A Django Tasks backend (DEP 14): `@task` functions run by queueadmin workers.

    TASKS = {"default": {"BACKEND": "queueadmin.core.tasks.QueueadminBackend", "QUEUES": []}}

A task is the processor named "task:<module path>" (e.g. "task:shop.tasks.send_mail").
`task.enqueue(*args, **kwargs)` submits a one-item request whose payload is
{"args": [...], "kwargs": {...}} through core.operations.submit, so it is
in the history and the dashboard like any request, and returns a TaskResult
whose id is the request id. The same class serves `django.tasks` (Django 6) and the
`django-tasks` backport (Django 5.2).

Priority: Django's -100..100 maps onto the engine's 0..99 (higher first) as
round((p + 100) * 99 / 200), halves up: -100 -> 0, -50 -> 25, 0 -> 50
(the engine's default), 50 -> 74, 100 -> 99.

A task may live in any importable module, as with Django's own backends: a
worker imports the module of a "task:" name and runs the attribute only if
it is a Task of this backend (never any other callable). Submission refuses
a "task:" name that this process did not enqueue itself, so a caller of the
API or the form cannot make workers import a module of its choosing. A
worker that cannot import a task leaves its items to one that can
(core/engine/runtime/routing.py).

The queue named by `queue_name` comes from the database when Redis does not
know it yet (a fresh Redis before any worker ran), and `default` always
exists. `aenqueue` and `aget_result` run off the event loop, on a thread of
their own (not the one Django's sync code shares).

Groups (tenants): tasks enqueued inside `with group("customer-42"):` (or
`enqueue_many(..., group=...)`) belong to that group: its limits apply and
groups take fair turns (docs/usage.md "Groups").

The package: framework.py (Django's Tasks names, either way in, and the
priority mapping), backend.py (the backend and submission: `enqueue`,
`enqueue_many`), results.py (a TaskResult from Redis or from the history),
running.py (the worker side: a task as a processor).
"""
from queueadmin.core.tasks.backend import Batch, QueueadminBackend, enqueue_many, group, task_for
from queueadmin.core.tasks.framework import (PREFIX, InvalidTask, Task, TaskResult, TaskResultDoesNotExist,
                                             TaskResultStatus, engine_priority, processor_name, task_backends)
from queueadmin.core.tasks.running import ItemTaskContext, adapter

__all__ = ["QueueadminBackend", "enqueue_many", "group", "Batch", "task_for", "adapter", "ItemTaskContext", "PREFIX",
           "engine_priority", "processor_name", "task_backends", "Task", "TaskResult", "TaskResultStatus",
           "TaskResultDoesNotExist", "InvalidTask"]
