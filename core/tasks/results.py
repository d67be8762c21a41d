"""A task's TaskResult: from Redis while its request is there (each item's
result or error, with the attempts), from the history once Redis let it go
(state and times only)."""
from __future__ import annotations

import json
from datetime import datetime, timezone

from queueadmin.core import clients
from queueadmin.core.tasks.framework import Task, TaskError, TaskResult, TaskResultStatus


def make_result(task: Task, rid: str, status, payload: dict, *, enqueued=None, started=None, finished=None,
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


def from_redis(alias: str, task: Task, rid: str, status: dict) -> TaskResult:
    """The result of a request Redis still holds."""
    client = clients.engine()
    records = list(client.results(rid))
    single = status["total"] == 1
    payload = client.items(rid, 0, 1)[0]["payload"] if single else {}
    payload = payload if isinstance(payload, dict) else {}  # e.g. "(encrypted: no key)": no args to show
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
    return make_result(task, rid, state, payload, enqueued=_dt(status["created_at"]), started=_dt(started),
                       finished=_dt(finished), errors=errors, workers=workers, value=value, backend=alias)


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


def from_record(alias: str, task: Task, record) -> TaskResult:
    """From the history, once Redis has let the request go: state and times
    only (return values and tracebacks stay in Redis for the queue's retention)."""
    payload = {}
    if record.total == 1 and record.items_preview:
        try:
            payload = json.loads(record.items_preview.splitlines()[0])
        except (ValueError, IndexError):
            payload = {}
    state = _request_status(record.state, record.failed + record.expired)
    return make_result(task, record.id, state, payload if isinstance(payload, dict) else {},
                       enqueued=record.created_at, started=record.started_at, finished=record.finished_at,
                       backend=alias)
