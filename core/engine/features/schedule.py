"""The long-term schedule of delayed requests, sharded over several keys, each
its own hash slot, so that on a cluster it spreads over the masters.

Two levels:

* near term: a request due within ``FAR_MS`` waits in its queue's ``sched``
  zset (the dispatch slot ``{q:NAME}``), where ``tick`` promotes it in one
  atomic step with the creation of its tokens (lua/tick-12.lua);
* long term: a request due later waits in one of ``SHARDS`` shard zsets of
  its queue, ``{prefix}:{qs:NAME:k}:sched`` with k = crc32(id) % SHARDS. The
  dispatch slot knows it only as registered and scheduled (``reqs`` state
  "s"), which de-duplication and priority changes need.

Moving (any worker, on each upkeep pass, every shard in one pipelined round
trip; see ``move``): the shards' entries due within ``HORIZON_MS`` are read; those
whose request is gone or finished are dropped; ``sched_move`` (dispatch slot)
adds every other one that the queue still has as scheduled to ``sched``;
then they leave the shard. Each step is idempotent, and an entry leaves its
shard only once ``sched`` has it (or its request is gone), so a crash or a
concurrent mover only repeats a step: nothing is lost, and starting stays the
one atomic s->q flip in ``tick``, so nothing starts twice.

The trade-off: a far-off submission costs one more round trip (the shard
entry is written first, then the request is created and registered), each
upkeep pass reads the SHARDS shards (one round trip, ~2 µs of Redis time per
shard when nothing is due), and a request reaches ``sched`` up to a minute
before it is due instead of at once.
"""
from __future__ import annotations

import time
import zlib

from queueadmin.core.engine.states import TERMINAL
from queueadmin.core.engine.store.queue_slot import Moved

SHARDS = 16
HORIZON_MS = 60_000  # shard entries due within this are moved to the queue's `sched`
FAR_MS = 2 * HORIZON_MS  # delays beyond this go to a shard: never moved before creation is long done
MOVE_BATCH = 500
ORPHAN_MS = 3_600_000  # an entry whose request was never registered is dropped this long after its time

def shard_of(rid: str) -> int:
    return zlib.crc32(rid.encode()) % SHARDS


def is_far(delay_ms: int) -> bool:
    return delay_ms > FAR_MS


def _now_ms() -> int:
    return int(time.time() * 1000)


def add(client, queue: str, rid: str, delay_ms: int) -> None:
    """Write a far-off request's shard entry (before the request is created,
    so a crash in between leaves only an entry that `move` drops)."""
    pipe = client.redis.pipeline(transaction=False)  # a pipeline, so that WAIT_REPLICAS covers it
    pipe.zadd(client.keys.queue(queue).sched_shard(shard_of(rid)), {rid: _now_ms() + delay_ms})
    pipe.execute()


def move(client, queue: str, shards: list[int] | None = None, now_ms: int | None = None) -> int:
    """Move shard entries due within the horizon to the queue's `sched`;
    returns how many were moved."""
    r, qk = client.redis, client.keys.queue(queue)
    now_ms = _now_ms() if now_ms is None else now_ms
    shards = range(SHARDS) if shards is None else shards
    pipe = r.pipeline(transaction=False)
    for k in shards:
        pipe.zrangebyscore(qk.sched_shard(k), "-inf", now_ms + HORIZON_MS, start=0, num=MOVE_BATCH,
                           withscores=True)
    found = [(k, rid, int(ready)) for k, entries in zip(shards, pipe.execute()) for rid, ready in entries]
    if not found:
        return 0
    pipe = r.pipeline(transaction=False)
    for _, rid, _ in found:
        pipe.hmget(client.keys.request(rid).meta, "state", "not_before")
    drop, candidates = [], []
    for (k, rid, ready), (state, not_before) in zip(found, pipe.execute()):
        if state is None or state in TERMINAL:  # gone, finished, cancelled, or a refused duplicate
            drop.append((k, rid))
        else:  # the ready time set at creation, by the server's clock
            candidates.append((k, rid, int(not_before) if not_before else ready))
    moved = 0
    if candidates:
        codes = client.store.queue.sched_move(queue, [(rid, ready) for _, rid, ready in candidates])
        for (k, rid, ready), code in zip(candidates, codes):
            if code in (Moved.MOVED, Moved.NOT_SCHEDULED) or now_ms - ready > ORPHAN_MS:
                drop.append((k, rid))
            moved += code == Moved.MOVED
    if drop:
        pipe = r.pipeline(transaction=False)
        for k, rid in drop:
            pipe.zrem(qk.sched_shard(k), rid)
        pipe.execute()
    return moved


def run_now(client, queue: str, rid: str) -> bool:
    """Move a far-off request straight to `sched`, due now; False if its shard
    does not have it or the queue no longer has it as scheduled."""
    r, qk = client.redis, client.keys.queue(queue)
    key = qk.sched_shard(shard_of(rid))
    if r.zscore(key, rid) is None:
        return False
    (code,) = client.store.queue.sched_move(queue, [(rid, 0)])
    r.zrem(key, rid)
    return code == Moved.MOVED


def entries(client, queue: str, limit: int = 5000) -> list[tuple[str, float]]:
    """Scheduled requests of a queue, both levels: (id, ready time ms), soonest
    first. A request cancelled while far off stays in its shard until its time
    is near (check the request's state)."""
    r, qk = client.redis, client.keys.queue(queue)
    pipe = r.pipeline(transaction=False)
    pipe.zrange(qk.sched, 0, limit - 1, withscores=True)
    for k in range(SHARDS):
        pipe.zrange(qk.sched_shard(k), 0, limit - 1, withscores=True)
    best: dict[str, float] = {}
    for level in pipe.execute():
        for rid, ready in level:
            best.setdefault(rid, ready)
    return sorted(best.items(), key=lambda e: e[1])[:limit]


def shard_keys(client, queue: str) -> list[str]:
    return [client.keys.queue(queue).sched_shard(k) for k in range(SHARDS)]
