"""Tasks as a Django developer writes them."""
import asyncio

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task


@task
def add(a, b):
    return a + b


@task
def echo(*args, **kwargs):
    return {"args": list(args), "kwargs": kwargs}


@task(takes_context=True)
def whoami(context, tag):
    return {"tag": tag, "attempt": context.attempt, "request": context.task_result.id, "index": context.index}


@task(queue_name="flaky")
def boom(message):
    raise ValueError(message)


@task
def square(x):
    return x * x


@task
async def add_async(a, b):
    await asyncio.sleep(0.01)
    return a + b


@task(takes_context=True)
async def whoami_async(context, tag):
    await asyncio.sleep(0.01)
    return {"tag": tag, "attempt": context.attempt, "request": context.task_result.id}


def not_a_task(x):
    """A plain function: workers must refuse to run it as "task:..."."""
    return x
