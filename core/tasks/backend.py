"""The backend, and submitting tasks: `enqueue` (one call, one request of
one item) and `enqueue_many` (many calls of a task, one request). Tasks are
submitted through core/operations.py, so they are in the history; the
queue a task names comes from the database when Redis does not know it yet."""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from datetime import datetime
from importlib import import_module
from typing import Callable, Iterable

from asgiref.sync import sync_to_async
from django.db import close_old_connections, transaction
from django.utils import timezone as dj_timezone

from queueadmin.core import clients, operations
from queueadmin.core.engine.client.limits import check_item
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features import groups, ratelimit
from queueadmin.core.engine.runtime.processors import MAX_NAME, ProcessorError
from queueadmin.core.models import RequestRecord
from queueadmin.core.tasks import results
from queueadmin.core.tasks.framework import (MAX_PRIORITY, MIN_PRIORITY, PREFIX, BaseTaskBackend, InvalidTask, Task,
                                             TaskResult, TaskResultDoesNotExist, TaskResultStatus, engine_priority,
                                             processor_name, task_backends, task_enqueued)

# -- groups (tenants) -------------------------------------------------------------

_group: contextvars.ContextVar[str | None] = contextvars.ContextVar("queueadmin_task_group", default=None)


@contextlib.contextmanager
def group(name: str | None):
    """Tasks enqueued inside (`.enqueue()`, `enqueue_many`) belong to the group
    `name` (a tenant: core/engine/features/groups.py), unless `enqueue_many` names
    one itself; None: no group. QueueError on a bad name, at once."""
    token = _group.set(groups.check_group(name))
    try:
        yield
    finally:
        _group.reset(token)


# -- the backend ----------------------------------------------------------------


class QueueadminBackend(BaseTaskBackend):
    supports_defer = True  # run_after -> the request's delay
    supports_async_task = True  # the worker awaits `async def` tasks on its event loop
    supports_get_result = True  # from Redis while the request is there, from the history after
    supports_priority = True

    def __init__(self, alias: str, params: dict):
        super().__init__(alias, params)
        self.options = params.get("OPTIONS", {})
        # The framework dropped its on-commit option (django-tasks 0.10, Django 6.0): it enqueues
        # at once. ENQUEUE_ON_COMMIT=True, its former name, submits when the transaction commits.
        self.enqueue_on_commit = bool(params.get("ENQUEUE_ON_COMMIT", self.options.get("ENQUEUE_ON_COMMIT", False)))

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        if len(processor_name(task)) > MAX_NAME:
            raise InvalidTask(f"{processor_name(task)!r} is longer than {MAX_NAME} characters")

    def enqueue(self, task: Task, args, kwargs) -> TaskResult:
        self.validate_task(task)
        payload = _payload(task, args, kwargs)
        result = results.make_result(task, "", TaskResultStatus.READY, payload, enqueued=dj_timezone.now())
        in_group = _group.get()  # read now: a submit on commit runs outside the caller's `with group(...)`

        def submit():
            sub = _submit(task, [payload], priority=task.priority, run_after=task.run_after, group=in_group)
            object.__setattr__(result, "id", sub.id)  # frozen dataclass; the id is known only now
            task_enqueued.send(type(self), task_result=result)

        _now_or_on_commit(self, submit)
        return result

    async def aenqueue(self, task: Task, args, kwargs) -> TaskResult:
        """`enqueue` on a thread of its own (thread_sensitive=False): slow Redis
        or database calls hold neither the event loop nor Django's shared sync
        thread. There is no transaction to wait for on that thread: it submits at once."""
        return await sync_to_async(_on_own_thread(self.enqueue), thread_sensitive=False)(task, args, kwargs)

    async def aget_result(self, result_id: str) -> TaskResult:
        """`get_result` on a thread of its own, as `aenqueue`."""
        return await sync_to_async(_on_own_thread(self.get_result), thread_sensitive=False)(result_id)

    def get_result(self, result_id: str) -> TaskResult:
        try:
            status = clients.engine().status(result_id) if result_id else None
            if status is not None and status["processor"].startswith(PREFIX):
                return results.from_redis(self.alias, task_for(status["processor"]), result_id, status)
            record = RequestRecord.objects.filter(id=result_id, processor__startswith=PREFIX).first()
            if record is not None:
                return results.from_record(self.alias, task_for(record.processor), record)
        except ProcessorError as exc:  # its task is gone from the code
            raise TaskResultDoesNotExist(f"{result_id}: {exc}") from exc
        raise TaskResultDoesNotExist(result_id)


def _on_own_thread(fn: Callable) -> Callable:
    """`fn` for a pool thread: database connections are handled as around a
    request (reused or closed per CONN_MAX_AGE), not left to the thread."""
    def run(*args):
        close_old_connections()
        try:
            return fn(*args)
        finally:
            close_old_connections()
    return run


def _now_or_on_commit(backend: QueueadminBackend, submit: Callable[[], None]) -> None:
    if backend.enqueue_on_commit and transaction.get_connection().in_atomic_block:
        transaction.on_commit(submit)  # a rollback drops it
    else:
        submit()


# -- submission -----------------------------------------------------------------


def _payload(task: Task, args, kwargs) -> dict:
    payload = {"args": list(args), "kwargs": dict(kwargs)}
    try:
        # the check of every entry point (core/engine/client/limits.py)
        check_item(payload, "the payload {args, kwargs}")
    except QueueError as exc:
        raise TypeError(f"arguments of task {task.module_path} must be JSON (dict, list, str, int, float, bool, "
                        f"None): {exc}") from None
    return payload


def _submit(task: Task, payloads: list[dict], *, priority: int, run_after: datetime | None = None,
            concurrency: int | None = None, dedup_key: str | None = None, then: dict | None = None,
            rate_limit: str | None = None, group: str | None = None):
    name = processor_name(task)
    client = clients.engine()
    if client.processors is not None:
        client.processors.add(name)  # a Task object in hand is a known processor
    delay = max(0.0, (run_after - dj_timezone.now()).total_seconds()) if run_after else 0

    def submit():
        return operations.submit(task.queue_name, name, payloads, priority=engine_priority(priority),
                                 concurrency=concurrency, delay=delay, dedup_key=dedup_key,
                                 dedup=dedup_key is not None, then=then, rate_limit=rate_limit, group=group)

    try:
        return submit()
    except QueueError as exc:  # a queue Redis does not know yet: from the database, then once more
        if str(exc) != f"unknown queue {task.queue_name!r}" or \
                task.queue_name not in operations.push_queues([task.queue_name], make_default=True):
            raise  # not a missing queue, or the database has none (`default` always exists)
    return submit()


@dataclass
class Batch:
    """What `enqueue_many` returns: the request's id (set when it is submitted,
    at commit with ENQUEUE_ON_COMMIT), its item count, and whether a pending
    request with the same de-dup key was returned instead."""
    id: str
    total: int
    duplicate: bool = False


def enqueue_many(task: Task, calls: Iterable, *, priority: int | None = None, concurrency: int | None = None,
                 dedup_key: str | None = None, then: dict | None = None, rate_limit: str | None = None,
                 group: str | None = None) -> Batch:
    """Submit one request of many items of the same task (one item per call),
    shown as one request with progress. Each call is `(args, kwargs)` (a
    2-tuple of a list/tuple and a dict), a list or tuple of positional
    arguments, or one positional argument. `priority` is Django's -100..100
    (default: the task's); `concurrency` caps the items run at once;
    `dedup_key` returns the pending request with that key instead of a new one.
    `then` names a processor to follow the request when it finishes
    (docs/usage.md "Chained requests"): its items are the task's return values.
    `rate_limit` (`20/s`, `600/min`, ...) caps how many of its items start in
    any such window, across all workers (docs/usage.md "Rate limits").
    `group`: the request's group (tenant, docs/usage.md "Groups"); default:
    the one of an enclosing `with group(...)`, if any."""
    backend = task.get_backend()
    if not isinstance(backend, QueueadminBackend):
        raise InvalidTask(f"task {task.module_path} does not use the queueadmin backend")
    backend.validate_task(task)
    payloads = [_payload(task, *_split(call)) for call in calls]
    if not payloads:
        raise ValueError("enqueue_many needs at least one call")
    priority = task.priority if priority is None else priority
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidTask(f"priority must be a whole number between {MIN_PRIORITY} and {MAX_PRIORITY}")
    rate_limit = ratelimit.canonical(rate_limit) or None  # RateLimitError (a ValueError) now, not at commit
    in_group = _group.get() if group is None else groups.check_group(group)  # QueueError now, not at commit
    batch = Batch(id="", total=len(payloads))

    def submit():
        sub = _submit(task, payloads, priority=priority, run_after=task.run_after, concurrency=concurrency,
                      dedup_key=dedup_key, then=then, rate_limit=rate_limit, group=in_group)
        batch.id, batch.duplicate = sub.id, sub.duplicate

    _now_or_on_commit(backend, submit)
    return batch


def _split(call) -> tuple[list, dict]:
    if isinstance(call, tuple) and len(call) == 2 and isinstance(call[0], (list, tuple)) and isinstance(call[1], dict):
        return list(call[0]), call[1]
    if isinstance(call, (list, tuple)):
        return list(call), {}
    return [call], {}


# -- which tasks are ours ---------------------------------------------------------


def task_for(name: str) -> Task:
    """The Task named "task:<module path>", from any importable module: the
    attribute must be a Task of this backend."""
    if not name.startswith(PREFIX):
        raise ProcessorError(f"{name!r} is not a task")
    module, _, attr = name[len(PREFIX):].rpartition(".")
    if not module or not attr or module.startswith("."):
        raise ProcessorError(f"{name!r} is not a task's module path")
    try:
        found = getattr(import_module(module), attr)
    except Exception as exc:  # not there, or its module fails to load (here: another worker may have it)
        raise ProcessorError(f"cannot import task {name!r}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(found, Task) or not isinstance(task_backends[found.backend], QueueadminBackend):
        raise ProcessorError(f"{name!r} is not a task of the queueadmin backend")
    return found
