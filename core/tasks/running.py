"""The worker side of Django Tasks: a task is run as a processor. The
engine's processor catalog resolves a "task:<module path>" name through
`adapter` (registered when this module loads, at app ready)."""
from __future__ import annotations

from dataclasses import dataclass
from inspect import iscoroutinefunction
from typing import Any, Callable

from django.db import close_old_connections
from django.utils import timezone as dj_timezone

from queueadmin.core.engine.runtime.processors import catalog
from queueadmin.core.tasks.backend import task_for
from queueadmin.core.tasks.framework import PREFIX, TaskContext, TaskResultStatus
from queueadmin.core.tasks.results import make_result


@dataclass(frozen=True, kw_only=True)
class ItemTaskContext(TaskContext):
    """The `context` of a `takes_context` task: Django's TaskContext (its
    task_result's id is the request id) plus the engine's item context."""
    item: Any  # core.engine ItemContext: attempt, request_id, index, extend_lease(seconds)

    @property
    def attempt(self) -> int:
        return self.item.attempt

    @property
    def index(self) -> int:
        return self.item.index

    def extend_lease(self, seconds: float) -> bool:
        return self.item.extend_lease(seconds)


def adapter(name: str) -> Callable:
    """The processor for a task: `(payload, ctx) -> task.func(*args, **kwargs)`,
    an `async def` for an async task (the worker awaits it)."""
    task = task_for(name)
    func = task.func

    def call_args(payload, ctx) -> tuple[list, dict]:
        if not isinstance(payload, dict):
            raise TypeError("a task item is {\"args\": [...], \"kwargs\": {...}}")
        args, kwargs = list(payload.get("args", [])), dict(payload.get("kwargs", {}))
        if task.takes_context:
            started = dj_timezone.now()
            result = make_result(task, ctx.request_id, TaskResultStatus.RUNNING, payload, started=started,
                                 workers=[""] * ctx.attempt)
            args.insert(0, ItemTaskContext(task_result=result, item=ctx))
        return args, kwargs

    if iscoroutinefunction(func):
        async def run_async(payload, ctx):
            args, kwargs = call_args(payload, ctx)
            return await func(*args, **kwargs)
        return run_async

    def run(payload, ctx):
        args, kwargs = call_args(payload, ctx)
        close_old_connections()  # as around a web request: a worker thread lives long
        try:
            return func(*args, **kwargs)
        finally:
            close_old_connections()
    return run


catalog.add_resolver(PREFIX, adapter)
