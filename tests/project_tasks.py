"""Tasks in a module of no installed app, as in a project's own package
(`shop/tasks.py`): workers run them as Django's own backends do."""
import os

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task

if os.environ.get("QUEUEADMIN_TEST_NOT_DEPLOYED"):  # a worker of a deploy that does not have this module yet
    raise ImportError("tests.project_tasks is not deployed here")


@task
def multiply(a, b):
    return a * b


@task(queue_name="elsewhere")
def located(x):
    return {"x": x}


@task
async def amultiply(a, b):
    return a * b
