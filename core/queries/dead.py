"""The dead-letters page, paged inside Redis.

Order: newest request first (request ids sort by creation time), then item
index as a number (#2 before #10). A request's dead letters are the members
of its `dead` ZSET (entry ids) scored by item index, so a page is a rank
range of a few ZSETs: the page costs one ZCARD per candidate request (in one
pipeline) plus reads for the rows shown, however many dead letters there
are. Dead letters written before the ZSET was scored by index are scored by
the time they died (a far larger number): they follow the others of their
request, oldest first.

Candidate requests: the live requests of the queue(s) with failures (one
SORT over each queue's index) and the finished ones with failures still in
Redis (from the database's history, newest 2,000).
"""
from __future__ import annotations

from queueadmin.core.engine.client.deadscan import DeadFilter, DeadScan
from queueadmin.core.models import RequestRecord

from .base import Page, _int, _loads, _payload, client, keys, live_meta, queue_names, rdb, sampled_queues, started_meta

LEGACY_SCORE = 10**11  # scores above this are times in ms (before dead letters were scored by index)
HISTORY_CANDIDATES = 2000
SEARCH_BUDGET = 5000  # dead letters a search page looks at, at most ("N+ match" beyond)
COUNT_BUDGET = 20000  # dead letters looked at to state N in a bulk action's confirmation


def _live_failed(queue: str, bounded: bool) -> list[str]:
    """Live requests of a queue with failed items not all discarded: one
    SORT of them all, or when `bounded` of those started_meta reads (the
    pages and /metrics, which refresh by themselves)."""
    if bounded:
        return [rid for rid, m in started_meta(queue)[0] if _int(m["failed"]) - _int(m["discarded"]) > 0]
    return [rid for rid, (failed, discarded) in live_meta(queue, ["failed", "discarded"])
            if rid and _int(failed) - _int(discarded) > 0]


def candidates(queue: str | None = None, request: str | None = None, names: list[str] | None = None,
               bounded: bool = False) -> dict[str, str]:
    """Requests that may have dead letters: id -> queue (of `names`, default
    every queue, configured only in the database too); `bounded`: of a
    queue's live requests, only those started_meta reads."""
    if request:
        name = rdb().hget(keys().request(request).meta, "queue")
        return {request: name} if name else {}
    found: dict[str, str] = {}
    for name in ([queue] if queue else names if names is not None else queue_names()):
        for rid in _live_failed(name, bounded):
            found[rid] = name
    qs = RequestRecord.objects.filter(failed__gt=0)
    if queue:
        qs = qs.filter(queue=queue)
    for rid, name in qs.order_by("-created_at").values_list("id", "queue")[:HISTORY_CANDIDATES]:
        found.setdefault(rid, name)
    return found


def _counted(found: dict[str, str]) -> list[tuple[str, int]]:
    """(request id, dead letters) newest request first, those with none left out."""
    rids = sorted(found, reverse=True)
    pipe = rdb().pipeline(transaction=False)
    for rid in rids:
        pipe.zcard(keys().request(rid).dead)
    return [(rid, n) for rid, n in zip(rids, pipe.execute()) if n]


def counts_by_queue() -> dict[str, int]:
    """Dead letters per queue, counted as the page counts them (live requests
    and finished ones still in Redis): what /metrics and `queue_status` say."""
    found = candidates(names=client().queues(), bounded=True)  # the queues Redis knows: counting writes nothing
    out = {name: 0 for name in set(found.values())}
    for rid, n in _counted(found) if found else []:
        out[found[rid]] += n
    return out


def _window(counts: list[tuple[str, int]], start: int, stop: int) -> list[tuple[str, int, int]]:
    """The rank ranges (request, first, last) that rows start..stop-1 of the
    concatenated per-request lists fall in."""
    out, offset = [], 0
    for rid, n in counts:
        lo, hi = max(start, offset), min(stop, offset + n)
        if lo < hi:
            out.append((rid, lo - offset, hi - offset - 1))
        offset += n
        if offset >= stop:
            break
    return out


def dead_page(queue: str | None = None, request: str | None = None, page=1, size: int = 50,
              processor: str = "") -> dict:
    """One page of dead letters: {"rows", "pg", "count", "sampled"}."""
    found = candidates(queue, request, bounded=True)
    counts = _scan().narrow(list(found), DeadFilter(processor=processor)) if found else []
    pg = Page.of(page, sum(n for _, n in counts), size)
    window = _window(counts, pg.start, pg.stop) if pg.total else []
    rows = _rows(window, found)
    return {"rows": rows, "pg": pg, "count": pg.total, "sampled": not request and sampled_queues(queue)}


def _rows(window: list[tuple[str, int, int]], found: dict[str, str]) -> list[dict]:
    if not window:
        return []
    r, k = rdb(), keys()
    pipe = r.pipeline(transaction=False)
    for rid, lo, hi in window:
        pipe.zrange(k.request(rid).dead, lo, hi, withscores=True)
        pipe.hmget(k.request(rid).meta, "processor", "state")
    answers = pipe.execute()
    picked = []  # (rid, entry id, score, processor, state)
    for i, (rid, _, _) in enumerate(window):
        processor, state = answers[2 * i + 1]
        picked += [(rid, eid, score, processor or "", state or "") for eid, score in answers[2 * i]]
    # stream entries or lean requests' items, in one round trip
    entries = client().items_at([(rid, eid) for rid, eid, *_ in picked]) if picked else []
    pipe = r.pipeline(transaction=False)
    for (rid, *_), e in zip(picked, entries):
        pipe.hget(k.request(rid).results, e["index"] if e else -1)
    records = pipe.execute()
    out = []
    for (rid, eid, score, processor, state), e, raw in zip(picked, entries, records):
        fields = {"i": e["index"], "p": e["payload"]} if e else {}
        rec = _loads(raw)
        dead_at = score / 1000 if score > LEGACY_SCORE else rec.get("finished_at")
        out.append({"request": rid, "queue": found.get(rid, ""), "processor": processor, "request_state": state,
                    "entry": eid, "index": _int(fields.get("i")) if fields else None,
                    "payload": _payload(fields.get("p")), "dead_at": dead_at,
                    "error": rec.get("error") or "", "traceback": rec.get("traceback") or "",
                    "attempts": rec.get("attempts"), "worker": rec.get("worker", "")})
    return out


def dead_pairs(queue: str | None = None, request: str | None = None) -> list[tuple[str, str]]:
    """Every (request id, entry id) matching the filter, ids only (for "all" actions)."""
    found = candidates(queue, request)
    rids = sorted(found, reverse=True)
    pipe = rdb().pipeline(transaction=False)
    for rid in rids:
        pipe.zrange(keys().request(rid).dead, 0, -1)
    return [(rid, eid) for rid, eids in zip(rids, pipe.execute()) for eid in eids]


# -- search by error text and time: a bounded walk with a cursor (engine/client/deadscan.py) ----------


def _scan() -> DeadScan:
    eng = client()
    return DeadScan(eng.store, eng.reads)


def matching_requests(flt: DeadFilter, request: str | None = None) -> tuple[dict[str, str], list[tuple[str, int]]]:
    """The candidate requests (id -> queue) and, of them, those with dead
    letters of the filter's processor: (request, letters), newest first."""
    found = candidates(flt.queue or None, request)
    return found, (_scan().narrow(list(found), flt) if found else [])


def dead_search(flt: DeadFilter, request: str | None = None, cursor: str | None = None, size: int = 50) -> dict:
    """One page of the dead letters matching `flt` from `cursor`: {"rows",
    "count", "exact", "next", "looked"}. The count is of the letters looked
    at (at most SEARCH_BUDGET): exact when the walk reached the end."""
    found, counted = matching_requests(flt, request)
    got = _scan().scan([rid for rid, _ in counted], flt, cursor, budget=SEARCH_BUDGET, keep=size)
    meta = _metas({x.request for x in got.letters})
    items = client().items_at([(x.request, x.entry) for x in got.letters]) if got.letters else []
    rows = [_row(x.request, x.entry, x.score, *meta.get(x.request, ("", "")), x.index, x.record, found)
            for x in got.letters]
    for row, item in zip(rows, items):
        row["payload"] = _payload(item["payload"]) if item else None
    if not flt.reads_records:  # every letter of the narrowed requests matches: their sum is exact and cheap
        return {"rows": rows, "count": sum(n for _, n in counted), "exact": True, "next": got.next,
                "looked": got.looked}
    return {"rows": rows, "count": got.matched, "exact": got.stopped_at is None, "next": got.next,
            "looked": got.looked}


def match_count(flt: DeadFilter, request: str | None = None, budget: int = COUNT_BUDGET) -> tuple[int, bool, list]:
    """(how many match, whether that is exact, the candidate request ids) for
    a bulk action's confirmation: a sum of counts when no record is read,
    else a walk of at most `budget` letters."""
    _, counted = matching_requests(flt, request)
    rids = [rid for rid, _ in counted]
    if not flt.reads_records:
        return sum(n for _, n in counted), True, rids
    got = _scan().scan(rids, flt, budget=budget, keep=0, full=False)
    return got.matched, got.stopped_at is None, rids


def _metas(rids) -> dict[str, tuple[str, str]]:
    rids = sorted(rids)
    pipe = rdb().pipeline(transaction=False)
    for rid in rids:
        pipe.hmget(keys().request(rid).meta, "processor", "state")
    return {rid: (p or "", st or "") for rid, (p, st) in zip(rids, pipe.execute())}


def _row(rid, eid, score, processor, state, index, rec, found) -> dict:
    """A dead letter as the page and the API show it (payload read separately)."""
    dead_at = score / 1000 if score > LEGACY_SCORE else rec.get("finished_at")
    return {"request": rid, "queue": found.get(rid, ""), "processor": processor, "request_state": state,
            "entry": eid, "index": index, "payload": None, "dead_at": dead_at,
            "error": rec.get("error") or "", "traceback": rec.get("traceback") or "",
            "attempts": rec.get("attempts"), "worker": rec.get("worker", "")}
