"""Chained requests: a request may name what follows it,

    then = {"processor": P, "queue": Q, "mode": "each" | "all", "on_failure": False,
            "priority": ..., "concurrency": ..., "time_limit": ...}

When it finishes, exactly one follow-up request is submitted: `each` has one
item per successful result, in index order; `all` has one item, the list of
every item's result in index order (null for an item that failed): the
reduce step. A failed, cancelled or expired request has a follow-up only
with `on_failure`.

Exactly once, even when a worker dies as the request finishes: the follow-up's
id is derived from its parent's, so a second attempt finds it created (and
registering it with its queue again is harmless); the parent's id waits in
the `chains` sorted set until its follow-up exists, so any worker's upkeep
finishes the job if the worker that saw the request finish died first.

Hangs on the engine's events (events.py): FINISHED and CANCELLED.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time

from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.states import TERMINAL

log = logging.getLogger("queueadmin.worker")

MODES = ("each", "all")
FIELDS = {"processor", "queue", "mode", "on_failure", "priority", "concurrency", "time_limit"}
SWEEP_AFTER_MS = 5_000  # a parent finished this long ago without its follow-up: any worker submits it


def spec(then, default_queue: str) -> dict:
    """A checked, normalised `then` (QueueError for anything else)."""
    if not isinstance(then, dict):
        raise QueueError('then must be an object like {"processor": "echo", "mode": "each"}')
    unknown = set(then) - FIELDS
    if unknown:
        raise QueueError(f"then: unknown field(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(FIELDS))})")
    processor, mode = then.get("processor"), then.get("mode", "each")
    if not isinstance(processor, str) or not processor:
        raise QueueError("then.processor must name a processor")
    if mode not in MODES:
        raise QueueError("then.mode must be 'each' or 'all'")
    queue = then.get("queue") or default_queue
    if not isinstance(queue, str):
        raise QueueError("then.queue must be a queue name")
    out = {"processor": processor, "queue": queue, "mode": mode, "on_failure": bool(then.get("on_failure", False))}
    for key in ("priority", "concurrency", "time_limit"):
        if then.get(key) is not None:
            out[key] = then[key]
    return out


def follow_up_id(rid: str) -> str:
    """The follow-up's request id: the same for every attempt."""
    return hashlib.sha256(f"then:{rid}".encode()).hexdigest()[:17]


def follow(client, rid: str) -> str | None:
    """Submit `rid`'s follow-up if it is finished and has none yet; returns the
    follow-up's id (None: not finished, no follow-up wanted, or gone)."""
    meta = client.redis.hgetall(client.keys.request(rid).meta)
    if not meta or "then" not in meta:
        client.redis.zrem(client.keys.chains, rid)  # expired with its retention, or no chain
        return None
    if meta.get("state") not in TERMINAL:
        return None
    if meta.get("then_id"):
        client.redis.zrem(client.keys.chains, rid)
        return None if meta["then_id"] == "none" else meta["then_id"]
    then = json.loads(meta["then"])
    fid, refused = None, {}
    if meta["state"] == "completed" or then.get("on_failure"):
        try:
            fid = _submit(client, rid, then)
        except QueueError as exc:  # results too large as items, its queue gone...: said once, not tried forever
            log.warning("request %s finished: its follow-up cannot be submitted: %s", rid, exc)
            refused = {"then_error": str(exc)[:500]}
    pipe = client.redis.pipeline(transaction=False)
    pipe.hset(client.keys.request(rid).meta, mapping={"then_id": fid or "none", **refused})
    pipe.zrem(client.keys.chains, rid)
    pipe.execute()
    return fid


def _submit(client, rid: str, then: dict) -> str | None:
    results = list(client.results(rid))
    if then["mode"] == "each":
        items = [r.get("result") for r in results if r.get("status") == "done"]
    else:
        items = [[r.get("result") if r.get("status") == "done" else None for r in results]]
    if not items:
        return None  # nothing succeeded: an `each` follow-up would have no item
    options = {k: then[k] for k in ("priority", "concurrency", "time_limit") if k in then}
    sub = client.submit(then["queue"], then["processor"], items, dedup=False, request_id=follow_up_id(rid),
                        parent=rid, **options)
    log.info("request %s finished: follow-up %s submitted (%s, %d item(s))", rid, sub.id, then["mode"], len(items))
    return sub.id


def follow_many(client, rids: list[str]) -> None:
    """The finished requests that have a chain get their follow-ups now."""
    if not rids:
        return
    scores = client.redis.zmscore(client.keys.chains, rids)
    for rid, score in zip(rids, scores):
        if score is not None:
            follow(client, rid)


def on_finished(finished) -> None:
    """events.FINISHED: the chained ones among the finished requests get their follow-ups."""
    follow_many(finished.client, finished.rids)


def on_cancelled(cancelled) -> None:
    """events.CANCELLED: a follow-up, if the request asked for one on failure."""
    if "then" in cancelled.meta:
        follow(cancelled.client, cancelled.rid)


def sweep(client, limit: int = 100) -> int:
    """Upkeep: parents registered a while ago whose follow-up is still missing
    (the worker that saw them finish died): follow them now."""
    now = int(time.time() * 1000)
    n = 0
    for rid in client.redis.zrangebyscore(client.keys.chains, "-inf", now - SWEEP_AFTER_MS, start=0, num=limit):
        if follow(client, rid):
            n += 1
        elif client.redis.zscore(client.keys.chains, rid) is not None:
            client.redis.zadd(client.keys.chains, {rid: now}, xx=True)  # still running: look again later
    return n
