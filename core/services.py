"""The Django-side entry points to the engine: one client per process, built
from settings, and the glue that mirrors requests into the database."""
from __future__ import annotations

import functools
from datetime import datetime, timezone

from django.conf import settings

from core.engine.client import QueueClient
from core.engine.connection import connect


@functools.cache
def redis_client():
    """A `Redis`, or a `RedisCluster` for a `redis+cluster://` URL or REDIS_CLUSTER."""
    conf = settings.QUEUEADMIN
    return connect(settings.REDIS_URL, cluster=getattr(settings, "REDIS_CLUSTER", False),
                   wait_replicas=(conf.get("WAIT_REPLICAS", 0), conf.get("WAIT_TIMEOUT_MS", 1000)))


@functools.cache
def engine() -> QueueClient:
    conf = settings.QUEUEADMIN
    return QueueClient(redis_client(), prefix=conf["PREFIX"], processors=conf["PROCESSORS"].keys())


def reset():
    """Forget cached clients (tests point REDIS_URL elsewhere)."""
    redis_client.cache_clear()
    engine.cache_clear()


def sync_queues() -> list[str]:
    """Make Redis know every queue of the database (and `default`)."""
    from .models import Queue

    if not Queue.objects.filter(name="default").exists():
        Queue.objects.create(name="default")  # post_save pushes it
    client = engine()
    for queue in Queue.objects.all():
        client.define_queue(queue.name, queue.to_config())
    return sorted(q.name for q in Queue.objects.all())


def _dt(epoch: float | None):
    return datetime.fromtimestamp(epoch, tz=timezone.utc) if epoch else None


PREVIEW_CHARS = 20_000


def db_text(text: str) -> str:
    """Text for the history's display columns: PostgreSQL text cannot hold NUL,
    so it shows as U+FFFD there (the items themselves keep it, in Redis)."""
    return text.replace("\x00", "\ufffd")


def record(status: dict, items_preview: str | None = None, user=None) -> None:
    """Create or update a request's summary from an engine status dict (and,
    once it finished, make its webhook delivery if it asked for one)."""
    from .models import RequestRecord

    if status.get("callback_url"):
        from . import webhooks

        webhooks.enqueue_finished(status)

    values = {
        "queue": status["queue"], "processor": status["processor"], "state": status["state"],
        "priority": status["priority"], "concurrency": status["concurrency"], "total": status["total"],
        "done": status["done"], "failed": status["failed"], "expired": status["expired"],
        "dedup_key": db_text(status.get("dedup_key", "")[:200]), "created_at": _dt(status["created_at"]),
        "not_before": _dt(status["not_before"]), "expires_at": _dt(status["expires_at"]),
        "started_at": _dt(status["started_at"]), "finished_at": _dt(status["finished_at"]),
    }
    if items_preview is not None:
        values["items_preview"] = db_text(items_preview[:PREVIEW_CHARS])
    if user is not None and getattr(user, "is_authenticated", False):
        values["submitted_by"] = user
    RequestRecord.objects.update_or_create(id=status["id"], defaults=values)


def submit(queue: str, processor: str, items: list, user=None, **options):
    """Submit through the engine and record the request in the database."""
    import json

    client = engine()
    sub = client.submit(queue, processor, items, **options)
    status = client.status(sub.id)
    if status and not sub.duplicate:
        preview = "\n".join(i if isinstance(i, str) else json.dumps(i) for i in items[:2000])
        record(status, items_preview=preview, user=user)
    return sub


def record_many(statuses: list[dict]) -> None:
    """Record several summaries in one transaction (a worker's finished requests).
    A worker keeps its connection for good: when the database dropped it
    (restart, failover), reconnect and write once more."""
    from django.db import InterfaceError, OperationalError, connection, transaction

    for attempt in (1, 2):
        try:
            with transaction.atomic():
                for status in statuses:
                    record(status)
            return
        except (OperationalError, InterfaceError):
            if attempt == 2 or connection.in_atomic_block:
                raise
            connection.close()
