"""The scheduled page: requests waiting for their start time (near-term and
far-off shards), and periodic requests with their next and last run."""
from __future__ import annotations

from queueadmin.core import clients
from queueadmin.core import periodic as periodic_web
from queueadmin.core.engine.features import schedule
from queueadmin.core.engine.client.queue_client import TERMINAL
from queueadmin.core.engine.client.dedup import split_key
from queueadmin.core.engine.store.packed import unpacked_values

from .base import _int, keys, queue_names, rdb

SCHEDULED_FIELDS = ("processor", "priority", "concurrency", "total", "created_at", "expires_at", "dedup_key", "state")


def scheduled(queue: str | None = None) -> list[dict]:
    r, k = rdb(), keys()
    rows = []
    for name in ([queue] if queue else queue_names()):
        due = schedule.entries(clients.engine(), name, 5000)  # near-term `sched` and the far-off shards
        if not due:
            continue
        pipe = r.pipeline(transaction=False)
        for rid, _ in due:
            pipe.hmget(k.request(rid).meta, *SCHEDULED_FIELDS)
        values = [unpacked_values(SCHEDULED_FIELDS, v) for v in pipe.execute()]  # packed: engine/store/packed.py
        for (rid, at), (proc, prio, conc, total, created, expires, dkey, state) in zip(due, values):
            if state in TERMINAL:
                continue  # cancelled while far off: its shard entry goes when its time is near
            rows.append({"request": rid, "queue": name, "start_at": at / 1000, "processor": proc or "",
                         "priority": _int(prio), "concurrency": _int(conc), "total": _int(total),
                         "created_at": _int(created) / 1000 if created else None,
                         "expires_at": _int(expires) / 1000 if expires else None, "dedup_key": split_key(dkey or "")[1],
                         "state": state or "?"})
    rows.sort(key=lambda x: x["start_at"])
    return rows


def periodic() -> list[dict]:
    """Periodic requests: definitions from the database, next and last run
    from Redis (core.periodic.mirror also brings the two in step)."""
    rows = []
    for obj, live in periodic_web.mirror():
        last = live["last"]
        rows.append({"name": obj.name, "enabled": obj.enabled, "queue": obj.queue_id, "processor": obj.processor,
                     "when": f"cron {obj.cron}" + ("" if obj.timezone == "UTC" else f" ({obj.timezone})")
                     if obj.cron else f"every {obj.interval_seconds:,} s",
                     "catch_up": obj.catch_up, "next_at": live["next"] / 1000 if live["next"] else None,
                     "last_at": last["at"] / 1000 if last.get("at") else None,
                     "last_request": last.get("request") or obj.last_request_id, "error": last.get("error", "")})
    return rows
