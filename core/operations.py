"""Operations: the one door through which every entry point changes the
queue (the dashboard's views, the HTTP API, the management commands, Django
Tasks, the admin), so that each change keeps the request history in the
database in step (core/history.py) the same way, whoever asked for it.

* Submitting: `submit` (de-duplicated within the user's scope), and the
  queues a submission needs in Redis: `sync_queues` (every queue of the
  database), `push_queues` (the ones Redis lacks, from the database).
* Steering a request: `cancel`, `set_priority`, `set_concurrency` (each
  returns the status after the change, as recorded), `retry_dead` and
  `discard` (dead letters), `run_now` (a scheduled request), `stop_item`,
  `requeue` (in-flight items; a dead holder is first recovered exactly as a
  live worker would: `recover_worker`).
* Workers: `control_worker` (quiet or stop a worker process).
* Bulk by filter: in core/bulk_operations.py, built on the ones here.
* Queues: `set_paused`. Periodic requests: `run_periodic` (submits once now),
  `set_periodic_enabled` (pause, resume).

Who may do what is the entry points' business (core/auth.py), except for
`run_periodic`: it submits, so its user must be one who may submit.

Every steering operation takes `actor=` (core/audit.py `Actor`, built by the
entry point: the dashboard's user, the API's token, the command's name, the
admin's user) and, once the change is made, writes one audit entry per
request it touched, so every door records the same entries. Nothing is
recorded for a change that did not happen (an error, or nothing to do).
"""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timezone

from django.db import transaction

from queueadmin.core import audit, clients, conf, history, queries
from queueadmin.core.audit import Actor
from queueadmin.core.auth import can_act
from queueadmin.core.engine.client.dedup import INTERNAL
from queueadmin.core.engine.client.workers import COMMANDS as WORKER_COMMANDS, WorkerSteering
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features import periodic, ratelimit
from queueadmin.core.engine.runtime.registry import Registry
from queueadmin.core.engine.runtime.upkeep import Upkeep
from queueadmin.core.models import PeriodicRequest, Queue, QueueGroup
from queueadmin.core.queries.workers import short_id

# -- submitting ---------------------------------------------------------------------


def dedup_scope(user) -> str:
    """Whose duplicates a submission may return (core/engine/client/dedup.py):
    a signed-in user's (the dashboard, and every API token of that owner),
    or, with no user (commands, Django Tasks), the internal scope."""
    if user is not None and getattr(user, "is_authenticated", False) and user.pk is not None:
        return f"user:{user.pk}"
    return INTERNAL


def submit(queue: str, processor: str, items: list, user=None, **options):
    """Submit through the engine (de-duplicated within the user's scope) and
    record the request in the history."""
    client = clients.engine()
    sub = client.submit(queue, processor, items, dedup_scope=dedup_scope(user), **options)
    status = client.status(sub.id)
    if status and not sub.duplicate:  # an encrypted queue's items are not copied to the database in clear
        encrypted = client.queue_config(queue, max_age=2.0).encrypt
        history.record(status, items_preview="" if encrypted else history.preview(items), user=user)
    return sub


def sync_queues() -> list[str]:
    """Make Redis know every queue of the database (and `default`)."""
    if not Queue.objects.filter(name="default").exists():
        Queue.objects.create(name="default")  # post_save pushes it
    client = clients.engine()
    for queue in Queue.objects.all():
        client.define_queue(queue.name, queue.to_config())
    for group in QueueGroup.objects.all():  # a group's own limits (features/groups.py)
        client.set_group_limits(group.queue_id, group.name, group.concurrency,
                                ratelimit.canonical(group.rate_limit) or None)
    return sorted(q.name for q in Queue.objects.all())


def push_queues(names, *, make_default: bool = False) -> set[str]:
    """Of `names`, the queues Redis does not know yet but the database
    configures (a fresh install before any worker ran `sync_queues`) are
    pushed to Redis now; with `make_default`, a missing `default` row is made
    first, as migration 0002 does. Only those, and only then: nothing
    rewrites configuration on each call. Returns the names Redis knows now."""
    names = list(dict.fromkeys(names))
    if not names:
        return set()
    client = clients.engine()
    pipe = client.redis.pipeline(transaction=False)
    for name in names:
        pipe.exists(client.keys.queue(name).config)
    known = {name for name, there in zip(names, pipe.execute()) if there}
    missing = [name for name in names if name not in known]
    if make_default and "default" in missing:
        Queue.objects.get_or_create(name="default")
    for row in Queue.objects.filter(name__in=missing):
        client.define_queue(row.name, row.to_config())
        known.add(row.name)
    return known


# -- steering a request ---------------------------------------------------------------


def refresh(rid: str) -> dict | None:
    """Mirror a request's current Redis status into its history row; returns it."""
    status = clients.engine().status(rid)
    if status:
        history.record(status)
    return status


def _audit_request(actor, action: str, rid: str, status: dict | None, **fields):
    """One audit entry about request `rid` (its queue from `status` when known)."""
    audit.record(actor, action, queue=(status or {}).get("queue", ""), request_id=rid, **fields)


def cancel(rid: str, *, actor: Actor | None = None) -> dict | None:
    clients.engine().cancel(rid)
    status = refresh(rid)
    left = (status["total"] - status["done"] - status["failed"] - status["expired"]) if status else None
    _audit_request(actor, "cancel", rid, status, count=left)
    return status


def set_priority(rid: str, priority: int, *, actor: Actor | None = None) -> dict | None:
    before = clients.engine().status(rid) or {}
    clients.engine().set_priority(rid, priority)
    status = refresh(rid)
    _audit_request(actor, "set_priority", rid, status, detail={"from": _int(before.get("priority")), "to": priority})
    return status


def set_concurrency(rid: str, concurrency: int, *, actor: Actor | None = None) -> dict | None:
    before = clients.engine().status(rid) or {}
    clients.engine().set_concurrency(rid, concurrency)
    status = refresh(rid)
    _audit_request(actor, "set_concurrency", rid, status,
                   detail={"from": _int(before.get("concurrency")), "to": concurrency})
    return status


def retry_dead(rid: str, entry_ids: list[str] | None = None, *, actor: Actor | None = None) -> int:
    """Send dead letters back to run (all of the request's when no ids); returns how many."""
    n = clients.engine().retry_dead(rid, entry_ids)
    status = refresh(rid)
    if n:
        _audit_request(actor, "retry_dead", rid, status, count=n, detail=_entries(entry_ids))
    return n


def discard(rid: str, entry_ids: list[str] | None = None, *, actor: Actor | None = None) -> int:
    """Drop dead letters for good (all of the request's when no ids); returns how many."""
    n = clients.engine().discard_dead(rid, entry_ids)
    if n:
        _audit_request(actor, "discard", rid, clients.engine().status(rid), count=n, detail=_entries(entry_ids))
    return n


def run_now(queue: str, rid: str, *, actor: Actor | None = None) -> bool:
    """Make a scheduled request due now; False if it is no longer scheduled."""
    done = clients.engine().run_now(queue, rid)
    if done:
        audit.record(actor, "run_now", queue=queue, request_id=rid)
    return done


def stop_item(rid: str, entry: str, *, actor: Actor | None = None) -> bool:
    """Ask the worker running an item to stop it (a failed attempt, retried
    as the queue allows); False when the item is not running."""
    eng = clients.engine()
    item = eng.item(rid, entry)  # read first: a stopped item's index is what people know it by
    stopped = eng.stop_item(rid, entry)
    if stopped:
        _audit_request(actor, "stop_item", rid, eng.status(rid), target=_item_label(item, entry), count=1,
                       detail={"entry": entry, "worker": (item or {}).get("consumer", "")})
    return stopped


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _entries(entry_ids) -> dict:
    """The entries an action named (at most 100 kept: the count says how many)."""
    return {"entries": list(entry_ids)[:100]} if entry_ids else {"entries": "all"}


def _item_label(item: dict | None, entry: str) -> str:
    index = (item or {}).get("index")
    return f"#{index}" if index not in (None, "") else entry


def recover_worker(wid: str) -> int:
    """Give back a dead worker's tokens and make its items due (engine logic)."""
    eng = clients.engine()
    registry = Registry(eng.redis, eng.keys, dead_after=conf.get("DEAD_AFTER_SECONDS"))
    return Upkeep(eng, registry, by="dashboard").recover(wid)


def requeue(pairs: list[tuple[str, str]], *, actor: Actor | None = None) -> int:
    """Make the given (request, entry) items due now; recovers dead holders."""
    by_rid: dict[str, list[str]] = defaultdict(list)
    for rid, eid in pairs:
        by_rid[rid].append(eid)
    dead = {w["id"] for w in queries.workers() if w["dead"]}
    eng = clients.engine()
    if dead:
        holders = set()
        for rid, eids in by_rid.items():
            for eid in eids:
                item = eng.item(rid, eid)  # a stream's entry or a lean request's item (engine reads)
                if item and item["consumer"] in dead:
                    holders.add(item["consumer"])
        for wid in holders:
            recover_worker(wid)
    n = 0
    for rid, eids in by_rid.items():
        try:
            done = eng.requeue(rid, eids)
        except QueueError:
            continue  # finished meanwhile
        n += done
        if done:
            _audit_request(actor, "requeue", rid, eng.status(rid), count=done, detail=_entries(eids))
    return n


# -- workers ------------------------------------------------------------------------------


def control_worker(wid: str, command: str, *, actor: Actor | None = None) -> bool:
    """Ask a live worker to go quiet (take nothing new, finish what it holds,
    stay alive) or to stop (finish or hand back what it holds, then exit);
    its heartbeat reads the ask within about a second (client/workers.py).
    False when no live worker has that id; QueueError for another command."""
    if command not in WORKER_COMMANDS:
        raise QueueError(f"unknown worker command {command!r}: quiet or stop")
    eng = clients.engine()
    asked = WorkerSteering(eng.redis, eng.keys, dead_after=conf.get("DEAD_AFTER_SECONDS")).ask(wid, command)
    if asked:
        audit.record(actor, f"{command}_worker", target=f"worker {short_id(wid)}", detail={"worker": wid})
    return asked


# -- queues and periodic requests -----------------------------------------------------------


def set_paused(queue: str, paused: bool, *, actor: Actor | None = None) -> None:
    """Pause or resume a queue: its database row (whose post_save pushes the
    configuration to Redis; the row follows Redis, or neither changes), or,
    for a queue Redis alone knows, Redis."""
    row = Queue.objects.filter(name=queue).first()
    if row is None:
        clients.engine().set_paused(queue, paused)
    else:
        row.paused = paused
        with transaction.atomic():
            row.save(update_fields=["paused"])
    audit.record(actor, "pause_queue" if paused else "resume_queue", queue=queue)


def run_periodic(obj: PeriodicRequest, user=None, *, actor: Actor | None = None) -> str:
    """Submit a periodic request's request once now; its due times stay as
    they were. It is a submission: `user` must be one who may submit
    (QueueError if not), whatever their permissions on periodic requests."""
    if not can_act(user):
        raise QueueError("running it now submits a request, and you may not submit requests "
                         "(that needs queueadmin.change_requestrecord)")
    client = clients.engine()
    rid = periodic.run_now(client, obj.to_definition())
    status = client.status(rid)
    if status:
        history.record(status, items_preview=history.preview(obj.item_list()), user=user)
    PeriodicRequest.objects.filter(pk=obj.pk).update(last_request_id=rid,
                                                     last_run_at=_from_ms(periodic.server_ms(client)))
    audit.record(actor, "run_periodic", queue=obj.queue_id, request_id=rid, target=f"periodic {obj.name}",
                 count=(status or {}).get("total"))
    return rid


def set_periodic_enabled(obj: PeriodicRequest, enabled: bool, *, actor: Actor | None = None) -> None:
    """Pause (workers stop firing it within a tick) or resume (from its next due
    time: times passed while paused are not made up)."""
    before = obj.enabled
    obj.enabled = enabled
    try:
        with transaction.atomic():  # the row follows Redis, or neither changes
            obj.save(update_fields=["enabled"])  # post_save publishes or removes it (core/periodic.py)
    except Exception:
        obj.enabled = before
        raise
    audit.record(actor, "resume_periodic" if enabled else "pause_periodic", queue=obj.queue_id,
                 target=f"periodic {obj.name}")


def _from_ms(ms):
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc) if ms else None
