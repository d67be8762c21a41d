"""Reading the queue: a request's status, results and items, dead letters,
and queue-wide figures. The `reads` collaborator of QueueClient
(queue_client.py); no writes here."""
from __future__ import annotations

import json
from typing import Callable, Iterator

from queueadmin.core.engine.client.dedup import split_key
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features import latency
from queueadmin.core.engine.features.encryption import open_record, payload_value
from queueadmin.core.engine.states import TERMINAL  # noqa: F401 (read from here by the Django side too)
from queueadmin.core.engine.store import Store
from queueadmin.core.engine.store.packed import SHORT, as_unpacked, item_of, read_unpacked, unindexed, unpacked_meta

_COUNTERS = ("total", "done", "failed", "expired", "priority", "concurrency")
_TIMES = ("created_at", "started_at", "finished_at", "not_before", "expires_at")
PACKED_FIELDS = ("priority", "concurrency", "state")  # what live_requests reads of a request that may wait packed


class Reads:
    def __init__(self, store: Store, queue_config: Callable[..., QueueConfig]):
        self.store, self.redis, self.keys = store, store.redis, store.keys
        self.queue_config = queue_config

    def meta(self, rid: str) -> dict:
        """A request's meta hash; QueueError when Redis does not have it."""
        meta = self.redis.hgetall(self.keys.request(rid).meta)
        if not meta:
            raise QueueError(f"unknown request {rid!r} (never submitted, or cleaned up after its retention)")
        return unpacked_meta(rid, meta)

    def status(self, rid: str) -> dict | None:
        """The request's state and counts, or None if Redis no longer has it."""
        rk = self.keys.request(rid)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(rk.meta)
        pipe.zcard(rk.leases)
        pipe.zcard(rk.dead)
        meta, leased, dead = pipe.execute()
        return parse_status(unpacked_meta(rid, meta), leased, dead) if meta else None

    def statuses(self, rids: list[str]) -> list[dict | None]:
        pipe = self.redis.pipeline(transaction=False)
        for rid in rids:
            rk = self.keys.request(rid)
            pipe.hgetall(rk.meta)
            pipe.zcard(rk.leases)
            pipe.zcard(rk.dead)
        out = pipe.execute()
        return [parse_status(unpacked_meta(rid, out[i]), *out[i + 1:i + 3]) if out[i] else None
                for rid, i in zip(rids, range(0, len(out), 3))]

    def finished_statuses(self, rids: list[str]) -> list[dict]:
        """Statuses of finished requests, for history: their meta hashes in one
        round trip (nothing is in flight any more); the leases and dead-letter
        counts only for those with a webhook, whose summary shows them."""
        pipe = self.redis.pipeline(transaction=False)
        for rid in rids:
            pipe.hgetall(self.keys.request(rid).meta)
        metas = [unpacked_meta(rid, m) for rid, m in zip(rids, pipe.execute()) if m]
        hooked = [m for m in metas if m.get("callback_url")]
        full = dict(zip((m["id"] for m in hooked), self.statuses([m["id"] for m in hooked]))) if hooked else {}
        return [full.get(m["id"]) or parse_status(m, 0, 0) for m in metas]

    def results(self, rid: str, batch: int = 1000) -> Iterator[dict]:
        """One record per item, ordered by index."""
        meta = self.meta(rid)
        total, state = int(meta.get("total", 0)), meta.get("state")
        missing = {"cancelled": "cancelled", "expired": "expired"}.get(state, "pending")
        rk = self.keys.request(rid)
        for start in range(0, total, batch):
            idx = list(range(start, min(total, start + batch)))
            for i, raw in zip(idx, self.redis.hmget(rk.results, idx)):
                record = open_record(json.loads(raw)) if raw else {"status": missing}
                if record.get("status") == "retrying" and state in ("cancelled", "expired"):
                    record["status"] = missing
                yield {"index": i, **record}

    def items(self, rid: str, start: int = 0, count: int = 50) -> list[dict]:
        """A page of items with their payload, state and result (for dashboards)."""
        meta = self.meta(rid)
        rk = self.keys.request(rid)
        # entries are in index order (retried items are appended again later);
        # reading up to the page's end costs O(start + count)
        lean = self.lean_item(rid) if meta.get("lean") == "1" else None
        if lean is not None:
            entries = [(lean["e"], {"i": lean["i"], "p": lean["p"]})] if lean else []
        else:
            entries = self.redis.xrange(rk.items, "-", "+", count=start + count)
        by_index = {}
        for eid, fields in entries:
            by_index.setdefault(int(fields["i"]), (eid, fields["p"]))
        idx = list(range(start, min(int(meta.get("total", 0)), start + count)))
        results = self.redis.hmget(rk.results, idx) if idx else []
        leases = self.redis.zrange(rk.leases, 0, -1, withscores=True)
        lease_of = dict(leases)
        out = []
        for i, raw in zip(idx, results):
            eid, payload = by_index.get(i, (None, "null"))
            record = open_record(json.loads(raw)) if raw else {}
            status = record.get("status") or ("running" if eid in lease_of else "pending")
            out.append({"index": i, "entry": eid, "payload": payload_value(payload), **record, "status": status,
                        "lease_deadline": lease_of.get(eid)})
        return out

    def dead_letters(self, rid: str) -> list[dict]:
        rk = self.keys.request(rid)
        out = []
        for eid, at in self.redis.zrange(rk.dead, 0, -1, withscores=True):
            item = self.item(rid, eid)
            if not item:
                continue
            idx = item["index"]
            record = open_record(json.loads(self.redis.hget(rk.results, idx) or "{}"))
            out.append({"request": rid, "entry": eid, "index": idx, "payload": payload_value(item["payload"]),
                        "dead_at": record.get("finished_at", at / 1000), **record})
        return out

    # -- items, in a stream or lean (one item in a hash: lua/_request.lua) ---------

    def lean_item(self, rid: str) -> dict | None:
        """The fields of a lean request's item (e: entry id, i, p, h: holder,
        d: deliveries), {} if its key is gone; None for a stream request."""
        rk = self.keys.request(rid)
        pipe = self.redis.pipeline(transaction=False)
        pipe.type(rk.items)
        pipe.hmget(rk.meta, "p", "created_at", SHORT["created_at"])
        kind, (payload, created, short) = pipe.execute()
        if kind == "hash":
            return self.redis.hgetall(rk.items)
        if kind == "none" and payload is not None:  # packed: waiting for its first take (store/packed.py)
            return item_of(payload, created or short)
        return {} if kind == "none" else None

    def item(self, rid: str, entry: str) -> dict | None:
        """One item: {index, payload (JSON text), consumer ("" when not held), deliveries, idle_ms}."""
        return self.items_at([(rid, entry)])[0]

    def items_at(self, entries: list[tuple[str, str]]) -> list[dict | None]:
        """Items by (request id, entry id), each as `item` gives it (None:
        no such item), whether the request keeps a stream or is lean: one
        round trip."""
        trip = self.store.trip()
        answers = [self.store.request.item(rid, entry, trip=trip) for rid, entry in entries]
        trip.run()
        return [a.value for a in answers]

    def holders(self, rids: list[str]) -> list[list[dict]]:
        """For each request, the workers holding its items, as XPENDING's
        summary lists consumers ([{name, pending}]): one round trip."""
        trip = self.store.trip()
        answers = [self.store.request.holders(rid, trip=trip) for rid in rids]
        trip.run()
        return [a.value for a in answers]

    def live_requests(self, queue: str) -> dict[str, dict]:
        """Registered requests of a queue: id -> {priority, concurrency, scheduled}:
        those of its reqs hash, and one-item requests waiting packed, which
        have no entry there (lua/_common.lua waiting_packed): the rest of its
        index, and those it does not list (store/packed.py unindexed)."""
        qk = self.keys.queue(queue)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(qk.reqs)
        pipe.zrange(qk.index, 0, -1)
        reqs, index = pipe.execute()
        out = {}
        for rid, v in reqs.items():
            p, c, _, s = v.split("|")[:4]
            out[rid] = {"priority": int(p), "concurrency": int(c), "scheduled": s == "s"}
        packed = [rid for rid in dict.fromkeys([*index, *unindexed(self.redis, self.keys, queue)]) if rid not in out]
        if packed:
            pipe = self.redis.pipeline(transaction=False)
            for rid in packed:
                read_unpacked(pipe, self.keys.request(rid).meta, PACKED_FIELDS)
            for rid, (p, c, state) in zip(packed, (as_unpacked(PACKED_FIELDS, v) for v in pipe.execute())):
                if state in ("queued", "scheduled"):  # else finished (or gone) since the index was read
                    out[rid] = {"priority": int(p or 0), "concurrency": int(c or 1), "scheduled": state == "scheduled"}
        return out

    def _tokens_waiting(self, qk) -> int:
        """Waiting tokens, with the lane's entries that stand for one (store/packed.py)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(qk.tokens)
        pipe.llen(qk.lane)
        pipe.scard(qk.tomb)
        tokens, lane, tombs = pipe.execute()
        return tokens + max(0, lane - tombs)

    def queue_stats(self, queue: str) -> dict:
        """Depth by priority (items not yet started), in flight, scheduled, dead letters."""
        config = self.queue_config(queue)
        qk = self.keys.queue(queue)
        live = self.live_requests(queue)
        rids = list(live)
        by_priority: dict[int, int] = {}
        in_flight = dead = scheduled = 0
        since = []  # when each request with waiting items began to wait (latency.py)
        for rid, st in zip(rids, self.statuses(rids)):
            if not st:
                continue
            if live[rid]["scheduled"]:
                scheduled += st["total"]
                continue
            waiting = max(0, st["total"] - st["done"] - st["failed"] - st["expired"] - st["in_flight"])
            if waiting:
                by_priority[st["priority"]] = by_priority.get(st["priority"], 0) + waiting
                since.append(latency.waiting_since(st["created_at"], st["not_before"]))
            in_flight += st["in_flight"]
            dead += st["dead"]
        return {
            "queue": queue, "paused": config.paused, "requests": len(rids),
            "depth": sum(by_priority.values()), "depth_by_priority": dict(sorted(by_priority.items(), reverse=True)),
            "in_flight": in_flight, "scheduled": scheduled, "dead": dead,
            "tokens_waiting": self._tokens_waiting(qk), "tokens_held": self.redis.hlen(qk.held),
            "latency": latency.age(latency.oldest(since)), "oldest_waiting_at": latency.oldest(since),
        }



def parse_status(meta: dict, leased: int, dead: int) -> dict:
    st = dict(meta)
    for f in _COUNTERS:
        st[f] = int(meta.get(f, 0) or 0)
    for f in _TIMES:
        st[f] = int(meta[f]) / 1000 if meta.get(f) else None
    st["finalized"] = meta.get("finalized") == "1"
    st["in_flight"] = int(leased)
    st["dead"] = int(dead)
    st.pop("pub", None)
    if st.get("dedup_key"):  # the caller's key; its scope apart (dedup.py)
        st["dedup_scope"], st["dedup_key"] = split_key(st["dedup_key"])
    if "then" in st:  # a chained request: what follows it (core/engine/chains.py)
        try:
            st["then"] = json.loads(st["then"])
        except ValueError:
            st.pop("then")
    return st


def result_json(record: dict, compact: bool = True) -> str:
    """A result record as one line of standard JSON (a results download). A
    record stored before results were checked (limits.encode_value) that
    holds NaN or Infinity comes out as a corrupt one, not as invalid JSON."""
    separators = (",", ":") if compact else (", ", ": ")
    try:
        text = json.dumps(record, ensure_ascii=False, allow_nan=False, separators=separators)
    except ValueError:
        text = json.dumps({"index": record.get("index"), "status": "corrupt",
                           "error": "the stored record is not standard JSON (it holds NaN or Infinity)"},
                          separators=separators)
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")
