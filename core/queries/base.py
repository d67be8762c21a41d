"""What every page's reads share: the clients, paging, parsing helpers and
the list of queues."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

import redis as redis_lib

from queueadmin.core import clients
from queueadmin.core.engine.features.encryption import open_record, payload_value
from queueadmin.core.engine.store.packed import as_unpacked, read_unpacked, unindexed, unpacked_values
from queueadmin.core.models import Queue

META_FIELDS = ("total", "done", "failed", "expired", "priority", "state", "discarded", "processor")
STUCK_GRACE_MS = 250  # a lease this far past its deadline with nobody on it is stuck
# live requests of a queue read per render by the pages that refresh by themselves (the overview,
# in flight, dead letters): past this, the oldest SAMPLE (and those holding tokens: started_meta)
SAMPLE = 5_000
NEXT_IN_LINE = 500  # and the requests of the first waiting tokens (token_requests)


def now_ms() -> int:
    return int(time.time() * 1000)


def client():
    return clients.engine()


def rdb():
    return clients.engine().redis


def keys():
    return clients.engine().keys


# -- pagination ----------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One page of `total` rows; shared by every list, Redis- or DB-backed."""

    number: int
    size: int
    total: int

    @classmethod
    def of(cls, page, total: int, size: int = 50) -> "Page":
        try:
            number = int(page)
        except (TypeError, ValueError):
            number = 1
        pages = max(1, math.ceil(total / size))
        return cls(min(max(1, number), pages), size, total)

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.size))

    @property
    def start(self) -> int:
        return (self.number - 1) * self.size

    @property
    def stop(self) -> int:
        return min(self.total, self.start + self.size)

    @property
    def has_prev(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    def window(self, width: int = 2) -> list[int | None]:
        """Page numbers to link, with None for a gap: 1 … 4 5 [6] 7 8 … 20."""
        shown = {1, self.pages, *range(self.number - width, self.number + width + 1)}
        out, last = [], 0
        for n in sorted(x for x in shown if 1 <= x <= self.pages):
            if n - last > 1:
                out.append(None)
            out.append(n)
            last = n
        return out

    def slice(self, rows):
        return rows[self.start:self.stop]


# -- queues -----------------------------------------------------------------------


def queue_names() -> list[str]:
    """Queues Redis knows, after pushing any configured only in the database
    (a fresh install before any worker ran); one indexed query."""
    names = client().queues()
    known = set(names)
    missing = [q for q in Queue.objects.exclude(name__in=names)] if names else list(Queue.objects.all())
    for q in missing:
        if q.name not in known:
            client().define_queue(q.name, q.to_config())
            names.append(q.name)
    return sorted(names)


def live_meta(queue: str, fields: list[str], limit: int | None = None, *,
              counted: bool = True) -> list[tuple[str, list]]:
    """(id, values of `fields`) of every live request of a queue: those of its
    index, oldest first (or the oldest `limit`), then its one-item requests
    that have no index entry (engine/store/packed.py unindexed: in flight,
    parked, waiting among the first `limit` tokens; not `counted`: but those
    waiting packed, which the caller reads the counts of)."""
    rows = _indexed_meta(queue, fields, limit)
    extra = unindexed(rdb(), keys(), queue, limit, counted=counted)
    if extra:
        pipe = rdb().pipeline(transaction=False)
        for rid in extra:
            read_unpacked(pipe, keys().request(rid).meta, fields)
        rows += [(rid, as_unpacked(fields, values)) for rid, values in zip(extra, pipe.execute())]
    return rows


def _indexed_meta(queue: str, fields: list[str], limit: int | None) -> list[tuple[str, list]]:
    """(id, values of `fields`) of every request of a queue's index
    (oldest first), or of the oldest `limit`, in one SORT whose GETs go
    through both layouts of a request's keys (its own slot, or its queue's
    for a one-item request: core/engine/keys.py); on Redis Cluster (no GET
    across slots), a pipeline of HMGETs. A SORT blocks Redis while it runs
    (about 5 µs a request here): pages that refresh by themselves pass a `limit`."""
    r, k = rdb(), keys()
    index = k.queue(queue).index
    own, in_queue = k.meta_patterns(queue)
    gets = ["#"] + [f"{p}->{f}" for p in (own, in_queue) for f in fields]
    window = {} if limit is None else {"start": 0, "num": limit}
    try:
        flat = r.sort(index, by="nosort", get=gets, **window)
    except redis_lib.RedisError:  # Redis Cluster: no GET across slots (CROSSSLOT)
        rids = r.zrange(index, 0, -1 if limit is None else limit - 1)
        pipe = r.pipeline(transaction=False)
        for rid in rids:
            pipe.hmget(k.request(rid).meta, *fields)
        return [(rid, unpacked_values(fields, values)) for rid, values in zip(rids, pipe.execute())]
    n, width, out = len(fields), len(gets), []
    total = fields.index("total") + 1 + n if "total" in fields else None  # where a packed request shows
    for i in range(0, len(flat), width):
        rid = flat[i]
        if not k.in_queue_slot(rid or ""):
            out.append((rid, flat[i + 1:i + 1 + n]))
        elif total is not None and flat[i + total] is None:  # maybe packed: waiting for its first take
            out.append((rid, unpacked_values(fields, flat[i + 1 + n:i + width])))  # (engine/store/packed.py)
        else:
            out.append((rid, flat[i + 1 + n:i + width]))
    return out


def _as_dicts(rows) -> list[tuple[str, dict]]:
    return [(rid, dict(zip(META_FIELDS, values))) for rid, values in rows
            if rid is not None and values[0] is not None]  # else its meta is gone (cleaned up meanwhile)


def started_meta(queue: str) -> tuple[list[tuple[str, dict]], bool]:
    """(id, counters) of the live requests of a queue that may have items in
    flight or dead letters, read in bounded time, and whether they are a
    sample: every request holding or parking a token now (a worker on it,
    or a retry due), those next in line, and the oldest SAMPLE live
    requests. Past SAMPLE, a started request whose tokens all wait behind
    others is left out: a full read of a queue of a million waiting
    requests kept Redis busy for seconds, and these pages refresh by
    themselves."""
    rows = _indexed_meta(queue, META_FIELDS, limit=SAMPLE)  # the unindexed in flight or parked: token_requests
    seen = {rid for rid, _ in rows}
    extra = sorted(token_requests(queue) - seen)
    if extra:
        pipe = rdb().pipeline(transaction=False)
        for rid in extra:
            read_unpacked(pipe, keys().request(rid).meta, META_FIELDS)
        rows += [(rid, as_unpacked(META_FIELDS, values)) for rid, values in zip(extra, pipe.execute())]
    return _as_dicts(rows), len(seen) >= SAMPLE


def sampled_queues(queue: str | None = None) -> bool:
    """Whether started_meta samples the live requests of `queue` (or of some queue)."""
    names = [queue] if queue else queue_names()
    pipe = rdb().pipeline(transaction=False)
    for name in names:
        pipe.zcard(keys().queue(name).index)
    return any(n >= SAMPLE for n in pipe.execute())


def token_requests(queue: str) -> set[str]:
    """The requests of a queue with a token held by a worker, parked (at
    most SAMPLE: waiting for a retry or more items) or next in line (the
    first NEXT_IN_LINE waiting tokens: a started request whose token went
    back, ahead of the backlog)."""
    qk = keys().queue(queue)
    pipe = rdb().pipeline(transaction=False)
    pipe.hkeys(qk.held)
    pipe.zrange(qk.parked, 0, SAMPLE - 1)
    pipe.zrange(qk.tokens, 0, NEXT_IN_LINE - 1)
    held, parked, head = pipe.execute()
    return {t.rpartition("#")[0] for t in (*held, *parked, *head)}


def _float_or(v, default: float) -> float:
    """A float from Redis text, or `default` when absent or unreadable."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return default
    return f if f == f and f not in (float("inf"), float("-inf")) else default


def _int(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


# -- helpers -----------------------------------------------------------------------


def _loads(raw, default=None):
    if not raw:
        return {} if default is None else default
    try:
        return open_record(json.loads(raw))  # an encrypted queue's sealed values opened (encryption.py)
    except (TypeError, ValueError):
        return {"status": "corrupt", "error": "unreadable record in Redis"} if default is None else default


def _payload(raw):
    if raw is None:
        return None
    try:
        return payload_value(raw)  # json.loads, opened first when sealed (encryption.py)
    except (TypeError, ValueError):
        return raw


def _duration(rec: dict):
    s, f = rec.get("started_at"), rec.get("finished_at")
    try:
        return max(0.0, float(f) - float(s)) if s and f else None
    except (TypeError, ValueError):
        return None


def _stream_id(eid: str) -> tuple[int, int]:
    a, _, b = (eid or "0-0").partition("-")
    return _int(a), _int(b)
