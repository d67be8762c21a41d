"""Re-sealing under the newest encryption key what an older one sealed
(manage.py queue_reencrypt), in every request Redis holds, while workers
run: result records and attempt lines, the payloads of one-item requests
(a hash field), each replaced only if it still holds what was read
(lua/reseal_field-1.lua); item streams, which cannot be changed in place,
rebuilt with the same ids, groups and pending entries by one script that
first checks nothing was added meanwhile (lua/reseal_stream-2.lua).
"""
from __future__ import annotations

from queueadmin.core.engine.store import packed
from queueadmin.core.engine.features.encryption import (PAYLOAD, EncryptionError, Keyring, reseal_lines,
                                                        reseal_record)

BIG_HASH = 1000  # results hashes larger than this are read with HSCAN, not at once
WRITES_PER_TRIP = 1000  # re-sealed values sent per round trip at most
STREAM_MAX_ENTRIES = 20_000  # stale payloads rebuilt in one script call at most
STREAM_MAX_BYTES = 32 * 1024 * 1024  # and their bytes; a larger stream is reported, left under its key


class Rewrap:
    """What a re-encryption pass found and did."""

    def __init__(self):
        self.requests = 0  # requests looked at
        self.records = 0  # result records re-sealed (result and log values)
        self.payloads = 0  # payloads re-sealed (one-item requests keep theirs in a hash)
        self.in_streams = 0  # payloads under older keys in streams too large to rebuild at once
        self.stream_requests: list[str] = []  # the requests holding those (first 20)
        self.unreadable = 0  # values no configured key opens (left as they are)
        self.raced = 0  # values changed while being re-sealed (left to the newer write)

    def as_dict(self) -> dict:
        return dict(vars(self))


def reencrypt(store, ring: Keyring, *, batch: int = 200, dry_run: bool = False, progress=None) -> Rewrap:
    """Re-seal under the newest key every value sealed with an older one, in
    every request Redis holds (live, and finished ones kept for retention).
    Requests are found by SCAN of their meta hashes, `batch` at a time;
    `progress(Rewrap)` is called after each batch."""
    done = Rewrap()
    metas: list[str] = []
    for key in store.redis.scan_iter(match=f"{store.keys.prefix}:*:meta", count=1000):
        metas.append(key)
        if len(metas) >= batch:
            _rewrap_batch(store, ring, metas, done, dry_run)
            metas = []
            if progress:
                progress(done)
    if metas:
        _rewrap_batch(store, ring, metas, done, dry_run)
    if progress:
        progress(done)
    return done


def _request_id(keys, meta_key: str) -> str | None:
    body = meta_key[len(keys.prefix) + 1:-len(":meta")]  # {r:ID}  or  {TAG}:ID
    if body.startswith("{r:") and body.endswith("}"):
        return body[3:-1]
    tag, sep, rid = body.partition("}:")
    return rid if sep and tag.startswith("{") else None


def _rewrap_batch(store, ring: Keyring, metas: list[str], done: Rewrap, dry_run: bool) -> None:
    r, keys = store.redis, store.keys
    rids = [rid for rid in (_request_id(keys, m) for m in metas) if rid]
    pipe = r.pipeline(transaction=False)
    for rid in rids:
        rk = keys.request(rid)
        pipe.hmget(rk.meta, "queue", packed.SHORT["queue"])  # the latter in a compact meta (store/packed.py)
        pipe.type(rk.items)
        pipe.hlen(rk.results)
    found = pipe.execute()
    small = [rid for n, rid in enumerate(rids) if any(found[3 * n]) and 0 < found[3 * n + 2] <= BIG_HASH]
    pipe = r.pipeline(transaction=False)
    for rid in small:
        pipe.hgetall(keys.request(rid).results)
    records = dict(zip(small, pipe.execute())) if small else {}
    writes = []  # (request id, results or items, field, old, new, what)
    lean, streams = [], []
    for n, rid in enumerate(rids):
        queue, kind, count = found[3 * n:3 * n + 3]
        if not any(queue):
            continue  # not a request's meta hash, or gone meanwhile
        done.requests += 1
        rk = keys.request(rid)
        results = records[rid].items() if rid in records else r.hscan_iter(rk.results, count=1000) if count else ()
        for field, raw in results:
            if "!e1:" not in raw:
                continue
            try:
                new = reseal_lines(raw, ring) if field.startswith("a:") else reseal_record(raw, ring)
            except EncryptionError:
                done.unreadable += 1
                continue
            if new is not None:
                writes.append((rid, "results", field, raw, new, "records"))
                if len(writes) >= WRITES_PER_TRIP:  # a large request's records go as they are read
                    _apply(store, writes, done, dry_run)
                    writes = []
        if kind == "hash":
            lean.append((rid, "items"))
        elif kind == "stream":
            streams.append(rid)
        elif kind == "none":  # maybe packed: its payload in the meta (store/packed.py)
            lean.append((rid, "meta"))
    if lean:  # one-item requests: the payload is a hash field, re-sealed like a record
        pipe = r.pipeline(transaction=False)
        for rid, where in lean:
            pipe.hget(getattr(keys.request(rid), where), packed.PAYLOAD)
        for (rid, where), old in zip(lean, pipe.execute()):
            if old and ring.is_stale(old):
                try:
                    writes.append((rid, where, packed.PAYLOAD, old, ring.seal(ring.unseal(old, PAYLOAD), PAYLOAD),
                                   "payloads"))
                except EncryptionError:
                    done.unreadable += 1
    for rid in streams:
        _rewrap_stream(store, rid, ring, done, dry_run)
    _apply(store, writes, done, dry_run)


def _apply(store, writes: list, done: Rewrap, dry_run: bool) -> None:
    """Each (request id, hash, field, old, new, what) replaced if it still holds `old`: one round trip."""
    if not writes:
        return
    if dry_run:
        for *_, what in writes:
            setattr(done, what, getattr(done, what) + 1)
        return
    trip = store.trip()
    answers = [store.request.reseal_field(rid, where, field, old, new, trip=trip)
               for rid, where, field, old, new, _ in writes]
    trip.run()
    for (*_, what), answer in zip(writes, answers):
        if answer.value:
            setattr(done, what, getattr(done, what) + 1)
        else:
            done.raced += 1


def _rewrap_stream(store, rid: str, ring: Keyring, done: Rewrap, dry_run: bool, chunk: int = 1000) -> None:
    """A stream's stale payloads: its entries rebuilt with the same ids, the
    same consumer groups and pending entries (owner, idle time, deliveries),
    re-sealed, in one script that first checks nothing was added meanwhile;
    a stream too large for one script call is counted and left."""
    r, key = store.redis, store.keys.request(rid).items
    start, entries, size, too_big = "-", [], 0, False
    while True:
        got = r.xrange(key, start, "+", count=chunk)
        for eid, fields in got:
            p = fields.get("p", "")
            if ring.is_stale(p):
                size += len(p)
                entries.append((eid, p))
        if len(got) < chunk:
            break
        start = "(" + got[-1][0]
        if len(entries) > STREAM_MAX_ENTRIES or size > STREAM_MAX_BYTES:
            too_big = True
    if not entries:
        return
    if too_big or len(entries) > STREAM_MAX_ENTRIES or size > STREAM_MAX_BYTES:
        done.in_streams += len(entries)
        if len(done.stream_requests) < 20:
            done.stream_requests.append(rid)
        return
    if dry_run:
        done.payloads += len(entries)
        return
    args = []
    for eid, p in entries:
        try:
            args += [eid, ring.seal(ring.unseal(p, PAYLOAD), PAYLOAD)]
        except EncryptionError:
            done.unreadable += 1
    length, last = r.xlen(key), (r.xrevrange(key, "+", "-", count=1) or [("", None)])[0][0]
    if not args:
        return
    if store.request.reseal_stream(rid, length, last or "", args):
        done.payloads += len(args) // 2
    else:
        done.raced += len(args) // 2
