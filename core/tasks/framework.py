"""Django's Tasks framework, whichever way it is installed (`django.tasks` on
Django 6, the `django-tasks` backport on 5.2), and how its tasks map onto
the engine: a task is the processor "task:<module path>"; Django's priority
-100..100 maps onto the engine's 0..99."""
from __future__ import annotations

try:  # Django 6: the framework is built in
    from django.tasks import task_backends
    from django.tasks import exceptions as _exceptions
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.signals import task_enqueued
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import exceptions as _exceptions
    from django_tasks import task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django_tasks.signals import task_enqueued

InvalidTask = getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError
TaskResultDoesNotExist = _exceptions.TaskResultDoesNotExist

PREFIX = "task:"
MIN_PRIORITY, MAX_PRIORITY = -100, 100


def engine_priority(priority: int) -> int:
    """Django's -100..100 onto the engine's 0..99, rounding halves up."""
    return ((int(priority) - MIN_PRIORITY) * 99 + 100) // 200


def processor_name(task: Task) -> str:
    return PREFIX + task.module_path
