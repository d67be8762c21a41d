"""Operator actions: thin wrappers over the engine client that also keep the
database history in step, plus the few the client lacks.

* `discard` removes dead letters for good. Atomic without a new Lua script:
  an optimistic transaction (WATCH the request's dead-letter zset, read,
  MULTI, ZREM + mark the result record + count, EXEC; a concurrent retry or
  discard changes the zset, EXEC fails and we read again). Every key is in
  the request's `{r:ID}` slot, so it works on Redis Cluster too. The request's
  meta gets a `discarded` counter so "dead letters" = failed - discarded.
* `run_now` moves a scheduled request's ready time to now: one `ZADD XX` on
  the queue's schedule zset (atomic); the next worker tick promotes it.
* `requeue` makes in-flight items due now (client.requeue); if the worker
  holding them is dead it is first recovered exactly as a live worker would
  (the engine's `Worker.recover`: its tokens go back, its items become due).
"""
from __future__ import annotations

from collections import defaultdict


from queueadmin.core import conf
from queueadmin.core import queries, services
from queueadmin.core.engine.client.queue_client import QueueError
from queueadmin.core.engine.runtime.registry import Registry
from queueadmin.core.engine.runtime.upkeep import Upkeep


def _engine():
    return services.engine()


def refresh_record(rid: str) -> None:
    """Mirror a request's current Redis status into its history row."""
    st = _engine().status(rid)
    if st:
        services.record(st)


def cancel(rid: str) -> None:
    _engine().cancel(rid)
    refresh_record(rid)


def set_priority(rid: str, priority: int) -> None:
    _engine().set_priority(rid, priority)
    refresh_record(rid)


def set_concurrency(rid: str, concurrency: int) -> None:
    _engine().set_concurrency(rid, concurrency)
    refresh_record(rid)


def retry_dead(rid: str, entry_ids: list[str] | None = None) -> int:
    n = _engine().retry_dead(rid, entry_ids)
    refresh_record(rid)
    return n


def discard(rid: str, entry_ids: list[str] | None = None) -> int:
    """Drop dead letters (all of the request's when no ids); returns how many."""
    return _engine().discard_dead(rid, entry_ids)


def run_now(queue: str, rid: str) -> bool:
    """Make a scheduled request due now; False if it is no longer scheduled."""
    return _engine().run_now(queue, rid)


def recover_worker(wid: str) -> int:
    """Give back a dead worker's tokens and make its items due (engine logic)."""
    eng = _engine()
    registry = Registry(eng.redis, eng.keys, dead_after=conf.get("DEAD_AFTER_SECONDS"))
    return Upkeep(eng, registry, by="dashboard").recover(wid)


def requeue(pairs: list[tuple[str, str]]) -> int:
    """Make the given (request, entry) items due now; recovers dead holders."""
    by_rid: dict[str, list[str]] = defaultdict(list)
    for rid, eid in pairs:
        by_rid[rid].append(eid)
    dead = {w["id"] for w in queries.workers() if w["dead"]}
    if dead:
        eng = _engine()
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
            n += _engine().requeue(rid, eids)
        except QueueError:
            continue  # finished meanwhile
    return n


def set_paused(queue: str, paused: bool) -> None:
    from queueadmin.core.models import Queue

    row = Queue.objects.filter(name=queue).first()
    if row is not None:
        row.paused = paused
        row.save(update_fields=["paused"])  # post_save pushes the config to Redis
    else:
        _engine().set_paused(queue, paused)
