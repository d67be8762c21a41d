"""One item's page: its payload, result or error with traceback, log,
progress while it runs, and every attempt kept (core/engine/attempts.py).

An item is named by its request and its index (#n, its position in the
request). A request's stream keeps its items in index order under ids
Redis chose, so the item's entry is found by guessing (a request made in
one call has ids T-0, T-1, ...: one read), else by a binary search over
the stream's ids (a streamed request: about forty reads), and a copy
appended later (a dead letter sent back to run) wins over the original.
"""
from __future__ import annotations

from queueadmin.core.engine import attempts

from .base import STUCK_GRACE_MS, _duration, _loads, _payload, client, keys, now_ms, rdb
from .requests import with_rates
from .workers import runs, workers

LAST = 2**64 - 1  # the largest part of a stream id
SEARCH_STEPS = 160  # a binary search over 64-bit ms and sequence parts needs at most ~130
TAIL_SCAN = 10_000  # copies appended after the originals looked at for a later copy of the item


def item(rid: str, index: int) -> dict | None:
    """Everything the item's page shows, or None: no such request in Redis
    (never submitted, or past its retention) or no item #index in it."""
    st = client().status(rid)
    if not st or not 0 <= index < st["total"]:
        return None
    lean = client().lean_item(rid)
    found = _lean_entry(lean, index) if lean is not None else _stream_entry(rid, index, st["total"])
    r, rk = rdb(), keys().request(rid)
    pipe = r.pipeline(transaction=False)
    pipe.hget(rk.results, index)
    pipe.hget(rk.results, attempts.field(index))
    if found:
        pipe.zscore(rk.leases, found[0])
        pipe.zscore(rk.dead, found[0])
    raw, lines, lease, dead = (pipe.execute() + [None, None])[:4]
    held = client().item(rid, found[0]) if found else None
    return _shown(rid, st, index, found, _loads(raw), lines, lease, dead, held)


def _shown(rid, st, index, found, record, lines, lease, dead, held) -> dict:
    """The page's item from what Redis holds."""
    record = record if isinstance(record, dict) else {}
    eid = found[0] if found else None
    consumer = (held or {}).get("consumer") or ""
    now = now_ms()
    running = progress = None
    if consumer:
        live = {w["id"]: w for w in workers() if w["live"]}
        progress = runs(live, consumer, eid)
        idle = int(held.get("idle_ms") or 0)
        running = {"worker": consumer, "attempt": held.get("deliveries") or 1, "taken_at": (now - idle) / 1000,
                   "elapsed": idle / 1000, "live": consumer in live}
    status = _status(st, record, running, lease, dead, now)
    holder = running if status == "running" else None
    timeline = attempts.timeline(lines, record, holder)
    return {
        "rid": rid, "index": index, "entry": eid, "request": with_rates(st),
        "payload": _payload(found[1]) if found else None, "has_payload": bool(found), "status": status,
        "record": record, "result": record.get("result"), "error": record.get("error"),
        "traceback": record.get("traceback"), "log": record.get("log"), "duration": _duration(record),
        "attempts": timeline, "attempt_count": max([a["n"] for a in timeline] + [record.get("attempts") or 0]),
        "running": running if status == "running" else None, "progress": progress,
        "lease_deadline": lease / 1000 if lease else None, "dead": dead is not None,
        "stuck": bool(status == "running" and lease is not None and (
            lease < now - STUCK_GRACE_MS or not running["live"])),
        "discarded": bool(record.get("discarded")), "live": status in ("pending", "running", "retrying"),
        "kept": attempts.KEPT,
    }


def _status(st, record, running, lease, dead, now) -> str:
    """As the request page's rows say it (queries/requests.py)."""
    status = record.get("status") or ""
    if dead is not None:
        return "failed"
    if running:
        if status == "retrying" and lease and lease > now and not running["live"]:
            return "retrying"
        return "running" if status != "retrying" or not lease or lease <= now else "retrying"
    if status:
        return status
    return {"cancelled": "cancelled", "expired": "expired"}.get(st.get("state"), "pending")


def _lean_entry(lean: dict, index: int) -> tuple[str, str] | None:
    """A one-item request's item (index 0): (entry id, payload JSON)."""
    if index != 0 or not lean or "e" not in lean:
        return None
    return lean["e"], lean.get("p", "null")


def _stream_entry(rid: str, index: int, total: int) -> tuple[str, str] | None:
    """(entry id, payload JSON) of item #index of a request's stream: its
    latest copy."""
    r, key = rdb(), keys().request(rid).items
    found = _guess(r, key, index) or _search(r, key, index)
    extra = r.xlen(key) - total
    if extra > 0:  # dead letters sent back run as copies appended at the end
        for eid, fields in r.xrevrange(key, count=min(extra, TAIL_SCAN)):
            if _index(fields) == index:
                return eid, fields.get("p", "null")
    return (found[0], found[1].get("p", "null")) if found else None


def _guess(r, key: str, index: int):
    """A request made in one call has its items at T-s, T-s+1, ...: one read."""
    first = r.xrange(key, count=1)
    if not first:
        return None
    ms, seq = _id(first[0][0])
    guess = seq + index - _index(first[0][1])
    if guess < 0:
        return None
    hit = r.xrange(key, min=f"{ms}-{guess}", max=f"{ms}-{guess}")
    return hit[0] if hit and _index(hit[0][1]) == index else None


def _search(r, key: str, index: int):
    """Binary search over the stream's ids: the originals are in index order."""
    ends = r.xrange(key, count=1), r.xrevrange(key, count=1)
    if not ends[0]:
        return None
    lo, hi = _id(ends[0][0][0]), _id(ends[1][0][0])
    for _ in range(SEARCH_STEPS):
        if lo > hi:
            return None
        mid = ((lo[0] + hi[0]) // 2, 0) if lo[0] < hi[0] else (lo[0], (lo[1] + hi[1]) // 2)
        mid = max(mid, lo)
        got = r.xrange(key, min=_fmt(mid), max=_fmt(hi), count=1)
        if not got:
            hi = _before(mid)
            continue
        at, i = _id(got[0][0]), _index(got[0][1])
        if i == index:
            return got[0]
        lo, hi = (_after(at), hi) if i < index else (lo, _before(at))
    return None


def _id(eid: str) -> tuple[int, int]:
    ms, _, seq = eid.partition("-")
    return int(ms), int(seq or 0)


def _fmt(at: tuple[int, int]) -> str:
    return f"{at[0]}-{at[1]}"


def _after(at: tuple[int, int]) -> tuple[int, int]:
    return (at[0], at[1] + 1) if at[1] < LAST else (at[0] + 1, 0)


def _before(at: tuple[int, int]) -> tuple[int, int]:
    return (at[0], at[1] - 1) if at[1] > 0 else (at[0] - 1, LAST)


def _index(fields: dict) -> int:
    try:
        return int(fields.get("i", -1))
    except (TypeError, ValueError):
        return -1
