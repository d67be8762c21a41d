"""A waiting one-item request, packed (docs/keys.md).

`submit_one` makes a one-item request as its meta hash alone: the payload in
field ``p``, and none of the fields every such request has at first. The
first script that takes or cancels it unpacks it (``unpack_lean`` in
lua/_request.lua): the meta gets those fields, and the item its own small
hash. Readers here see a packed request exactly as an unpacked one.

One waiting unindexed may be compact besides (its field ``q`` says so):
short names for three fields (SHORT), and no priority or concurrency while
they are what it implies (IMPLIED), so that a waiting job costs under 200 B.

Such a request never gets an entry in its queue's ``index`` (lua/_register.lua):
while it waits, its token stands for it and the queue's ``packed`` hash counts
it under its band; once claimed, its token is held or parked. One at LANE_P
with no de-dup key waits in the queue's ``lane`` instead, an entry "seq|id"
standing for its token (lua/_common.lua lane_entry). ``unindexed`` finds these
requests where they are, and ``waiting_counts`` reads the counts.
"""
from __future__ import annotations

import time

from .keys import PRIORITY_BAND, Keys, QueueKeys

ZMSCORE_BATCH = 10_000  # ids per ZMSCORE (Redis 6.2+)
HEAD_READ = 20  # tokens read at each band's head to find its first packed one
LANE_P = 50  # the priority of the requests a lane holds (LANE_P in lua/_common.lua)
LANE_LOW = (99 - LANE_P) * PRIORITY_BAND  # a lane entry's score as a token: this + its seq

PAYLOAD = "p"  # the meta field that holds a packed request's payload
# What unpack_lean adds to the meta (besides `id`), as Redis returns it; `lean`
# and `state` only to one that waits unindexed, which is made without them.
DEFAULTS = {"finalized": "1", "done": "0", "failed": "0", "expired": "0", "total": "1", "dedup_key": "",
            "lean": "1", "state": "queued"}
# The compact layout (SHORT and COMPACT_P/COMPACT_C in lua/_request.lua): the
# short name of each of three fields, and what an absent field implies.
SHORT = {"created_at": "c", "queue": "q", "processor": "f"}
IMPLIED = {"priority": str(LANE_P), "concurrency": "10"}
COMPACT = SHORT["queue"]  # the field that says a meta is compact


def unpacked_meta(rid: str, meta: dict) -> dict:
    """The meta hash as unpack_lean would leave it ({} stays {})."""
    if PAYLOAD not in meta:
        return meta
    if COMPACT in meta:
        meta = _full_names(meta)
    out = {**DEFAULTS, **meta, "id": rid}
    del out[PAYLOAD]
    return out


def _full_names(meta: dict) -> dict:
    """A compact meta with the full names, and what it implied."""
    out = {k: v for k, v in meta.items() if k not in _SHORT_NAMES}
    for name, short in SHORT.items():
        if short in meta:
            out[name] = meta[short]
    for name, value in IMPLIED.items():
        out.setdefault(name, value)
    return out


_SHORT_NAMES = frozenset(SHORT.values())


def item_of(payload: str, created_at: str) -> dict:
    """The item hash unpack_lean would make (lua/_request.lua's lean layout)."""
    return {"i": "0", "p": payload, "e": f"{created_at}-0", "d": "0"}


def unpacked_values(fields: tuple | list, values: list) -> list:
    """Meta fields read by name (HMGET, SORT ... GET), as they would be
    unpacked: when `fields` include "total", a meta that has some of them
    but no total is packed, and gets the defaults. Never compact: a reader
    by name goes through the index or a schedule, and a compact meta is of
    one waiting unindexed (read_unpacked reads those)."""
    if "total" not in fields:
        return values
    if values[fields.index("total")] is not None or all(v is None for v in values):
        return values
    return _filled(fields, values)


def _filled(fields, values: list) -> list:
    """A packed meta's values of `fields`, each it lacks as unpack_lean would write it."""
    return [DEFAULTS.get(f) if v is None else v for f, v in zip(fields, values)]


def read_unpacked(pipe, key: str, fields) -> None:
    """Queue an HMGET of meta `fields` whose answer `as_unpacked` reads: with
    the payload, which tells a request waiting packed (whose meta may have
    none of `fields`) from one that is gone, and the compact layout's fields."""
    pipe.hmget(key, *fields, PAYLOAD, *SHORT.values())


def as_unpacked(fields, values: list) -> list:
    """The values of `fields` of an answer of read_unpacked, as unpacked."""
    n = len(fields)
    values, payload, short = values[:n], values[n], values[n + 1:]
    if payload is None:
        return values
    read = {k: v for k, v in [*zip(fields, values), *zip(SHORT.values(), short)] if v is not None}
    if COMPACT in read:
        full = _full_names(read)
        values = [full.get(f) for f in fields]
    return _filled(fields, values)


def unindexed(redis, keys: Keys, queue: str, limit: int | None = None, *, counted: bool = True) -> list[str]:
    """The live one-item requests of `queue` without an index entry: those
    holding a token (in flight) or parking one (a retry due), then those
    whose token waits, in the order they are claimed, among the first
    `limit` waiting tokens (None: all of them). Not `counted`: without those
    waiting packed, which the queue's counts stand for (waiting_counts)."""
    qk = keys.queue(queue)
    last = -1 if limit is None else max(0, limit - 1)
    pipe = redis.pipeline(transaction=False)
    pipe.hkeys(qk.held)
    pipe.zrange(qk.parked, 0, -1)
    pipe.zrange(qk.tokens, 0, last, withscores=True)
    held, parked, waiting = pipe.execute()
    lane = lane_waiting(redis, qk, last)
    if lane:  # in claim order: tokens and lane entries by their scores
        waiting = sorted([*waiting, *lane], key=lambda pair: pair[1])[:None if limit is None else limit]
    tokens = [*held, *parked, *(t for t, _ in waiting)]
    rids = [rid for rid in dict.fromkeys(t.rpartition("#")[0] for t in tokens) if keys.in_queue_slot(rid)]
    out = []
    for i in range(0, len(rids), ZMSCORE_BATCH):
        batch = rids[i:i + ZMSCORE_BATCH]
        out += [rid for rid, score in zip(batch, redis.zmscore(qk.index, batch)) if score is None]
    if out and not counted:  # one waiting packed has no reqs entry (lua/_common.lua waiting_packed)
        out = [rid for rid, entry in zip(out, redis.hmget(qk.reqs, out)) if entry is not None]
    return out


def lane_waiting(redis, qk: QueueKeys, last: int = -1) -> list[tuple[str, float]]:
    """The lane's entries up to index `last` that still wait, as the tokens
    they stand for: (id#1, score) each, in order."""
    pipe = redis.pipeline(transaction=False)
    pipe.lrange(qk.lane, 0, last)
    pipe.smembers(qk.tomb)
    entries, tombs = pipe.execute()
    out = []
    for entry in entries:
        seq, _, rid = entry.partition("|")
        if rid not in tombs:
            out.append((f"{rid}#1", float(LANE_LOW + int(seq))))
    return out


def waiting_counts(redis, keys: Keys, queue: str) -> dict[int, int]:
    """Priority -> how many of the queue's one-item requests wait packed in its band."""
    return {int(p): int(n) for p, n in redis.hgetall(keys.queue(queue).packed).items() if int(n) > 0}


def oldest_waiting(redis, keys: Keys, queue: str, priorities) -> int | None:
    """When (ms) the oldest of the requests waiting packed in the bands of
    `priorities` was made: each band's first such token is its oldest
    (tokens wait in order), unless aging lifted a younger one there; in
    LANE_P's band, the lane's first live entry too."""
    qk, found = keys.queue(queue), []
    pipe = redis.pipeline(transaction=False)
    for p in priorities:
        low = (99 - p) * PRIORITY_BAND
        pipe.zrangebyscore(qk.tokens, low, f"({low + PRIORITY_BAND}", start=0, num=HEAD_READ)
    for heads in pipe.execute():
        found += [t[:-2] for t in heads if t.endswith("#1") and keys.in_queue_slot(t[:-2])][:1]
    if LANE_P in priorities:
        found += [t[:-2] for t, _ in lane_waiting(redis, qk, HEAD_READ - 1)][:1]
    if not found:
        return None
    indexed = redis.zmscore(qk.index, found)  # such a head does not wait packed: the index's own head counts it
    pipe = redis.pipeline(transaction=False)
    for rid in found:
        pipe.hmget(keys.request(rid).meta, "created_at", SHORT["created_at"])
    made = [full or short for full, short in pipe.execute()]
    return min((int(c) for c, score in zip(made, indexed) if c and score is None), default=None)


# A worker that reads packed requests says so in its queues' `can` hashes
# (routing.py), a line of its own beside the processors it can run; one that
# also counts the claims of those waiting without an index entry (cycle-18)
# adds a second, one that reads the queue's lane a third, and one that reads
# compact metas a fourth. It writes all: producers of the releases before
# look for the first ones.
PACKED_MARK, COUNTED_MARK, LANE_MARK, COMPACT_MARK = "\x00packed", "\x00counted", "\x00lane", "\x00compact"
WORKER_MARKS = (PACKED_MARK, COUNTED_MARK, LANE_MARK, COMPACT_MARK)
GATE_SECONDS = 5.0  # how long a producer trusts what it read of a queue's workers


class PackedGate:
    """Whether a producer may make a queue's one-item requests packed: not
    while a worker of an older release serves the queue (its `can` entry
    lacks COUNTED_MARK). One from before the packed layout would find
    neither the item nor the reqs entry and drop the request; one from
    before the counts would leave a claimed request counted as waiting for
    good. Such a producer asks submit_one for the full lean layout (it sends
    the id), which every release reads. Likewise a request may wait in the
    queue's lane only while every worker writes LANE_MARK: one from before
    lanes would never claim it; and be compact only while every worker
    writes COMPACT_MARK: one from before would take it without its processor.
    Read once per GATE_SECONDS per queue."""

    def __init__(self, redis, keys):
        self.redis, self.keys = redis, keys
        self._known: dict[str, tuple[float, bool, bool, bool]] = {}

    def _read(self, queue: str) -> tuple[float, bool, bool, bool]:
        now = time.monotonic()
        known = self._known.get(queue)
        if known is None or now - known[0] > GATE_SECONDS:
            workers = self.redis.hvals(self.keys.queue(queue).can)
            known = self._known[queue] = (now, *(all(mark in text for text in workers)
                                                 for mark in (COUNTED_MARK, LANE_MARK, COMPACT_MARK)))
        return known

    def allows(self, queue: str) -> bool:
        """Whether the queue's one-item requests may wait packed."""
        return self._read(queue)[1]

    def lanes(self, queue: str) -> bool:
        """Whether they may wait in the queue's lane."""
        return self._read(queue)[2]

    def compact(self, queue: str) -> bool:
        """Whether those waiting unindexed may have a compact meta."""
        return self._read(queue)[3]

    def forget(self) -> None:
        self._known.clear()
