"""A Django Tasks backend (DEP 14): `@task` functions run by queueadmin workers.

    TASKS = {"default": {"BACKEND": "queueadmin.core.tasks.QueueadminBackend", "QUEUES": []}}

A task is the processor named "task:<module path>" (e.g. "task:shop.tasks.send_mail").
`task.enqueue(*args, **kwargs)` submits a one-item request whose payload is
{"args": [...], "kwargs": {...}} through core.services.submit, so it is in the
history and the dashboard like any request, and returns a TaskResult whose id
is the request id. The same class serves `django.tasks` (Django 6) and the
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
(core/engine/routing.py).

The queue named by `queue_name` comes from the database when Redis does not
know it yet (a fresh Redis before any worker ran), and `default` always
exists. `aenqueue` and `aget_result` run off the event loop, on a thread of
their own (not the one Django's sync code shares).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import import_module
from inspect import iscoroutinefunction
from typing import Any, Callable, Iterable

from asgiref.sync import sync_to_async
from django.db import close_old_connections, transaction
from django.utils import timezone as dj_timezone

from queueadmin.core.engine.features import ratelimit
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.client.limits import check_item
from queueadmin.core.engine.runtime.processors import MAX_NAME, ProcessorError, catalog

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
        result = _result(task, "", TaskResultStatus.READY, payload, enqueued=dj_timezone.now())

        def submit():
            sub = _submit(task, [payload], priority=task.priority, run_after=task.run_after)
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
        from queueadmin.core import services
        from queueadmin.core.models import RequestRecord

        try:
            status = services.engine().status(result_id) if result_id else None
            if status is not None and status["processor"].startswith(PREFIX):
                return _from_redis(self, result_id, status)
            record = RequestRecord.objects.filter(id=result_id, processor__startswith=PREFIX).first()
            if record is not None:
                return _from_record(self, record)
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
        check_item(payload, "the payload {args, kwargs}")  # the check of every entry point (core/engine/limits.py)
    except QueueError as exc:
        raise TypeError(f"arguments of task {task.module_path} must be JSON (dict, list, str, int, float, bool, "
                        f"None): {exc}") from None
    return payload


def _submit(task: Task, payloads: list[dict], *, priority: int, run_after: datetime | None = None,
            concurrency: int | None = None, dedup_key: str | None = None, then: dict | None = None,
            rate_limit: str | None = None):
    from queueadmin.core import services

    name = processor_name(task)
    client = services.engine()
    if client.processors is not None:
        client.processors.add(name)  # a Task object in hand is a known processor
    delay = max(0.0, (run_after - dj_timezone.now()).total_seconds()) if run_after else 0

    def submit():
        return services.submit(task.queue_name, name, payloads, priority=engine_priority(priority),
                               concurrency=concurrency, delay=delay, dedup_key=dedup_key,
                               dedup=dedup_key is not None, then=then, rate_limit=rate_limit)

    try:
        return submit()
    except QueueError as exc:  # a queue Redis does not know yet: from the database, then once more
        if str(exc) != f"unknown queue {task.queue_name!r}" or not push_queue(task.queue_name):
            raise
    return submit()


def push_queue(name: str) -> bool:
    """Push a queue of the database to Redis (a fresh Redis before any worker
    ran), as the API and the commands do; `default` always exists (made here
    if the database has no row, as migration 0002 does). False when the
    database does not have it either."""
    from queueadmin.core import services
    from queueadmin.core.models import Queue

    row = Queue.objects.filter(name=name).first()
    if row is None and name == "default":
        row, _ = Queue.objects.get_or_create(name="default")
    if row is None:
        return False
    services.engine().define_queue(row.name, row.to_config())
    return True


@dataclass
class Batch:
    """What `enqueue_many` returns: the request's id (set when it is submitted,
    at commit with ENQUEUE_ON_COMMIT), its item count, and whether a pending
    request with the same de-dup key was returned instead."""
    id: str
    total: int
    duplicate: bool = False


def enqueue_many(task: Task, calls: Iterable, *, priority: int | None = None, concurrency: int | None = None,
                 dedup_key: str | None = None, then: dict | None = None, rate_limit: str | None = None) -> Batch:
    """Submit one request of many items of the same task (one item per call),
    shown as one request with progress. Each call is `(args, kwargs)` (a
    2-tuple of a list/tuple and a dict), a list or tuple of positional
    arguments, or one positional argument. `priority` is Django's -100..100
    (default: the task's); `concurrency` caps the items run at once;
    `dedup_key` returns the pending request with that key instead of a new one.
    `then` names a processor to follow the request when it finishes
    (docs/usage.md "Chained requests"): its items are the task's return values.
    `rate_limit` (`20/s`, `600/min`, ...) caps how many of its items start in
    any such window, across all workers (docs/usage.md "Rate limits")."""
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
    batch = Batch(id="", total=len(payloads))

    def submit():
        sub = _submit(task, payloads, priority=priority, run_after=task.run_after, concurrency=concurrency,
                      dedup_key=dedup_key, then=then, rate_limit=rate_limit)
        batch.id, batch.duplicate = sub.id, sub.duplicate

    _now_or_on_commit(backend, submit)
    return batch


def _split(call) -> tuple[list, dict]:
    if isinstance(call, tuple) and len(call) == 2 and isinstance(call[0], (list, tuple)) and isinstance(call[1], dict):
        return list(call[0]), call[1]
    if isinstance(call, (list, tuple)):
        return list(call), {}
    return [call], {}


# -- results --------------------------------------------------------------------


def _result(task: Task, rid: str, status, payload: dict, *, enqueued=None, started=None, finished=None,
            errors=(), workers=(), value=None, backend: str | None = None) -> TaskResult:
    result = TaskResult(task=task, id=rid, status=status, enqueued_at=enqueued, started_at=started,
                        finished_at=finished, last_attempted_at=started, args=payload.get("args", []),
                        kwargs=payload.get("kwargs", {}), backend=backend or task.backend, errors=list(errors),
                        worker_ids=list(workers))
    object.__setattr__(result, "_return_value", value)
    return result


def _dt(epoch: float | None):
    return datetime.fromtimestamp(epoch, tz=timezone.utc) if epoch else None


def _error(record: dict) -> TaskError:
    """The exception's class path from the traceback's last line ("mod.Error: msg";
    builtins print bare)."""
    tb = record.get("traceback") or record.get("error", "")
    last = tb.strip().splitlines()[-1] if tb.strip() else "Exception"
    cls = last.split(":", 1)[0].strip() or "Exception"
    return TaskError(exception_class_path=cls if "." in cls else f"builtins.{cls}", traceback=tb)


def _workers(record: dict) -> list[str]:
    """One entry per attempt (TaskResult.attempts counts them); only the last
    attempt's worker is recorded, earlier ones are ""."""
    attempts = int(record.get("attempts") or 0)
    return [""] * max(0, attempts - 1) + ([record.get("worker", "")] if attempts else [])


def _from_redis(backend: QueueadminBackend, rid: str, status: dict) -> TaskResult:
    from queueadmin.core import services

    client = services.engine()
    task = _task_for(status["processor"])
    records = list(client.results(rid))
    single = status["total"] == 1
    payload = client.items(rid, 0, 1)[0]["payload"] if single else {}
    errors = [_error(r) for r in records if r.get("error")]
    if single:
        record = records[0] if records else {}
        state = _item_status(status, record)
        started, finished = record.get("started_at"), record.get("finished_at")
        value = record.get("result") if state == TaskResultStatus.SUCCESSFUL else None
        workers = _workers(record)
    else:
        state = _request_status(status["state"], status["failed"] + status["expired"])
        started, finished = status["started_at"], status["finished_at"]
        value = [r.get("result") for r in records] if state == TaskResultStatus.SUCCESSFUL else None
        workers = [r.get("worker", "") for r in records if r.get("worker")]
    if state not in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED):
        finished = None
    return _result(task, rid, state, payload, enqueued=_dt(status["created_at"]), started=_dt(started),
                   finished=_dt(finished), errors=errors, workers=workers, value=value, backend=backend.alias)


def _item_status(status: dict, record: dict):
    item = record.get("status")
    if item == "done":
        return TaskResultStatus.SUCCESSFUL
    if item == "failed" or status["state"] in ("failed", "cancelled", "expired"):
        return TaskResultStatus.FAILED
    if status["in_flight"]:
        return TaskResultStatus.RUNNING
    return TaskResultStatus.READY  # waiting, or waiting to run again


def _request_status(state: str, failed: int):
    if state == "completed":
        return TaskResultStatus.FAILED if failed else TaskResultStatus.SUCCESSFUL
    if state in ("failed", "cancelled", "expired"):
        return TaskResultStatus.FAILED
    return TaskResultStatus.RUNNING if state == "running" else TaskResultStatus.READY


def _from_record(backend: QueueadminBackend, record) -> TaskResult:
    """From the history, once Redis has let the request go: state and times
    only (return values and tracebacks stay in Redis for the queue's retention)."""
    task = _task_for(record.processor)
    payload = {}
    if record.total == 1 and record.items_preview:
        try:
            payload = json.loads(record.items_preview.splitlines()[0])
        except (ValueError, IndexError):
            payload = {}
    state = _request_status(record.state, record.failed + record.expired)
    return _result(task, record.id, state, payload if isinstance(payload, dict) else {},
                   enqueued=record.created_at, started=record.started_at, finished=record.finished_at,
                   backend=backend.alias)


# -- the worker side --------------------------------------------------------------


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


def _task_for(name: str) -> Task:
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


def adapter(name: str) -> Callable:
    """The processor for a task: `(payload, ctx) -> task.func(*args, **kwargs)`,
    an `async def` for an async task (the worker awaits it)."""
    task = _task_for(name)
    func = task.func

    def call_args(payload, ctx) -> tuple[list, dict]:
        if not isinstance(payload, dict):
            raise TypeError("a task item is {\"args\": [...], \"kwargs\": {...}}")
        args, kwargs = list(payload.get("args", [])), dict(payload.get("kwargs", {}))
        if task.takes_context:
            started = dj_timezone.now()
            result = _result(task, ctx.request_id, TaskResultStatus.RUNNING, payload, started=started,
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
