"""The in-flight page, paged inside Redis.

An item in flight has an entry in its request's `leases` ZSET (entry id ->
lease deadline, or retry time for an item waiting to run again). The page
lists stuck items first (lease past its deadline: the worker died, froze or
was cut off), then the others; within each part by request (newest first),
then by deadline. Each part of a request is a score range of its `leases`
ZSET, so a page costs a few counting commands per request with items in
flight (one pipeline) plus reads for the rows shown.

Items held by a worker known to be dead whose lease has not run out yet
are flagged stuck on their row (and counted and listed as stuck): they are
found through the consumers of each stream's pending list, a small set
(what dead workers held), until a live worker recovers them.
"""
from __future__ import annotations

import time

import redis as redis_lib

from queueadmin.core.engine.client.queue_client import TERMINAL
from queueadmin.core.engine.errors import QueueError

from . import base
from .base import (STUCK_GRACE_MS, Page, _float_or, _int, _loads, _payload, client, keys, now_ms, queue_names, rdb,
                   started_meta)
from .workers import runs, workers

DEFAULT_TIME_LIMIT = 3600.0  # the queue setting's default, for queues that predate it
DEAD_SCAN = 1000  # entries near their deadline looked at per request held by a dead worker


def _candidates(queue: str | None) -> tuple[list[tuple[str, str, dict]], bool]:
    """(queue, request id, meta) of live requests that may have items in
    flight, newest first, and whether a queue's were sampled (started_meta)."""
    out, sampled = [], False
    for name in ([queue] if queue else queue_names()):
        metas, part = started_meta(name)
        sampled = sampled or part
        for rid, m in metas:
            if m["state"] == "running" or (m["state"] not in TERMINAL and _int(m["done"]) + _int(m["failed"])):
                out.append((name, rid, m))
    out.sort(key=lambda c: c[1], reverse=True)
    return out, sampled


def _dead_held(cands, summaries, live: dict, now: int) -> dict[str, list[str]]:
    """Entries held by dead workers whose lease has not run out: rid -> entry ids.

    Only requests whose pending list names a dead worker are looked at, and
    in them only entries due within the queue's lease (a running item's
    lease ends by then; what is due later waits for a retry), at most
    DEAD_SCAN per request: the cost stays that of what dead workers held
    when they died, not of the items waiting for a retry."""
    r, k = rdb(), keys()
    cutoff = now - STUCK_GRACE_MS
    asks = [(name, rid) for (name, rid, _), summary in zip(cands, summaries)
            if any(c["name"] not in live and int(c["pending"]) for c in (summary or {}).get("consumers") or [])]
    if not asks:
        return {}
    names = sorted({name for name, _ in asks})
    lease_ms = {name: _float_or(v, 60.0) * 1000 for name, v in zip(names, _lease_seconds(names))}
    pipe = r.pipeline(transaction=False)
    for name, rid in asks:
        pipe.zrangebyscore(k.request(rid).leases, f"({cutoff}", now + lease_ms[name] + 1000, start=0, num=DEAD_SCAN)
    near = [(rid, e) for (_, rid), eids in zip(asks, pipe.execute()) for e in eids]
    if not near:
        return {}
    items = client().items_at(near)  # a stream's entry or a lean request's item, in one round trip
    keep = [(rid, e, it) for (rid, e), it in zip(near, items) if it and it["consumer"] and it["consumer"] not in live]
    if not keep:
        return {}
    pipe = r.pipeline(transaction=False)
    for rid, _, it in keep:
        pipe.hget(k.request(rid).results, it["index"])
    keep = [(rid, e) for rid, e, _ in keep]
    out: dict[str, list[str]] = {}
    for (rid, e), raw in zip(keep, pipe.execute()):
        if _loads(raw).get("status") != "retrying":  # waiting for its retry time: any token holder runs it
            out.setdefault(rid, []).append(e)
    return out


def _lease_seconds(names: list[str]) -> list:
    pipe = rdb().pipeline(transaction=False)
    for name in names:
        pipe.hget(keys().queue(name).config, "lease_seconds")
    return pipe.execute()


def inflight_page(queue: str | None = None, stuck_only: bool = False, page=1, size: int = 100) -> dict:
    """One page of items in flight: {"rows", "pg", "count", "stuck_count", "sampled", "sample"}."""
    r, k = rdb(), keys()
    cands, sampled = _candidates(queue)
    now = now_ms()
    cutoff = now - STUCK_GRACE_MS
    pipe = r.pipeline(transaction=False)
    for _, rid, _ in cands:
        rk = k.request(rid)
        pipe.zcard(rk.leases)
        pipe.zcount(rk.leases, "-inf", cutoff)
    answers = pipe.execute()
    totals = dict(zip((c[1] for c in cands), answers[0::2]))
    expired = dict(zip((c[1] for c in cands), answers[1::2]))
    cands = [c for c in cands if totals[c[1]]]
    live = {w["id"]: w for w in workers() if w["live"]}
    # like XPENDING's summary, for stream and lean requests, in one round trip
    summaries = [{"consumers": h} for h in client().holders([c[1] for c in cands])] if cands else []
    dead_held = _dead_held(cands, summaries, live, now)
    count = sum(totals[c[1]] for c in cands)
    stuck_count = sum(expired[c[1]] for c in cands) + sum(len(v) for v in dead_held.values())
    # the parts, in page order: (rid, kind, n) with kind "expired" | "dead" | "rest"
    parts = [(c[1], "expired", expired[c[1]]) for c in cands] + [(rid, "dead", len(e)) for rid, e in
                                                                    sorted(dead_held.items(), reverse=True)]
    if not stuck_only:
        parts += [(c[1], "rest", totals[c[1]] - expired[c[1]] - len(dead_held.get(c[1], ()))) for c in cands]
    pg = Page.of(page, sum(n for *_, n in parts), size)
    picked = _pick(parts, pg, cutoff, dead_held)
    rows = _rows(picked, {c[1]: c for c in cands}, live, now)
    return {"rows": rows, "pg": pg, "count": count, "stuck_count": stuck_count, "sampled": sampled,
            "sample": base.SAMPLE}


def _pick(parts, pg: Page, cutoff: int, dead_held: dict) -> list[tuple[str, str, float]]:
    """(request id, entry id, deadline ms) of the page's rows."""
    r, k = rdb(), keys()
    pipe, slices, offset = r.pipeline(transaction=False), [], 0
    for rid, kind, n in parts:
        lo, hi = max(pg.start, offset), min(pg.stop, offset + n)
        offset += n
        if lo >= hi:
            continue
        a, b = lo - (offset - n), hi - (offset - n)
        leases = k.request(rid).leases
        if kind == "expired":
            pipe.zrangebyscore(leases, "-inf", cutoff, start=a, num=b - a, withscores=True)
        elif kind == "rest" and rid in dead_held:  # few and short-lived: read up to the page, leave them out
            pipe.zrangebyscore(leases, f"({cutoff}", "+inf", start=0, num=b + len(dead_held[rid]), withscores=True)
        elif kind == "rest":
            pipe.zrangebyscore(leases, f"({cutoff}", "+inf", start=a, num=b - a, withscores=True)
        else:
            pipe.zmscore(leases, dead_held[rid][a:b])
        slices.append((rid, kind, a, b))
        if offset >= pg.stop:
            break
    out = []
    for (rid, kind, a, b), got in zip(slices, pipe.execute() if slices else []):
        if kind == "dead":
            out += [(rid, e, s) for e, s in zip(dead_held[rid][a:b], got) if s is not None]
        elif kind == "rest" and rid in dead_held:
            dead = set(dead_held[rid])
            out += [(rid, e, s) for e, s in got if e not in dead][a:b]
        else:
            out += [(rid, e, s) for e, s in got]
    return out


def _rows(picked, cands: dict, live: dict, now: int) -> list[dict]:
    if not picked:
        return []
    r, k = rdb(), keys()
    items = client().items_at([(rid, eid) for rid, eid, _ in picked])  # stream entries or lean items, one round trip
    names = sorted({cands[rid][0] for rid, *_ in picked})
    rids = sorted({rid for rid, *_ in picked})
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.hget(k.queue(name).config, "time_limit_seconds")
    for rid in rids:
        pipe.hget(k.request(rid).meta, "time_limit")
    for i, (rid, _, _) in enumerate(picked):
        pipe.hget(k.request(rid).results, items[i]["index"] if items[i] else -1)
    got = pipe.execute()
    queue_limit = {n: _float_or(v, DEFAULT_TIME_LIMIT) for n, v in zip(names, got)}
    request_limit = dict(zip(rids, got[len(names):len(names) + len(rids)]))
    records = got[len(names) + len(rids):]
    wall = time.time()
    rows = []
    for i, ((rid, eid, deadline), raw) in enumerate(zip(picked, records)):
        item = items[i]
        name, _, m = cands[rid]
        p = ({"consumer": item["consumer"], "times_delivered": item["deliveries"],
              "time_since_delivered": item["idle_ms"]} if item and item["consumer"] else None)
        wid = p["consumer"] if p else ""
        fields = {"i": item["index"], "p": item["payload"]} if item else {}
        rec = _loads(raw)
        current = runs(live, wid, eid)
        dead_worker = bool(wid) and wid not in live
        expired = deadline < now - STUCK_GRACE_MS
        waiting = rec.get("status") == "retrying" and not current and deadline > now
        if current and current["started"]:
            started = current["started"]
        elif p:
            started = wall - p["time_since_delivered"] / 1000
        else:
            started = wall
        limit = current["limit"] if current else _float_or(request_limit.get(rid), queue_limit.get(name, 0.0))
        elapsed = None if waiting else max(0.0, wall - started)  # waiting for a retry: not running
        rows.append({"queue": name, "request": rid, "processor": m.get("processor") or "", "entry": eid,
                     "index": _int(fields.get("i")) if fields else None, "payload": _payload(fields.get("p")),
                     "worker": wid, "attempts": p["times_delivered"] if p else 0, "deadline": deadline / 1000,
                     "started": started, "age": elapsed, "elapsed": elapsed, "limit": limit or 0.0,
                     "over_limit": bool(limit and elapsed is not None and elapsed > limit), "running": bool(current),
                     "kind": current["kind"] if current else "", "dead_worker": dead_worker,
                     "progress": current.get("progress") if current else None,
                     "note": current.get("note", "") if current else "",
                     "lease_expired": expired, "waiting_retry": waiting,
                     "stuck": (dead_worker or expired) and not waiting, "priority": _int(m.get("priority")),
                     "error": rec.get("error")})
    return rows


def inflight_pairs(queue: str | None = None) -> list[tuple[str, str]]:
    """Every stuck (request id, entry id), for "requeue all stuck"."""
    first = inflight_page(queue, stuck_only=True, page=1, size=1)
    if not first["stuck_count"]:
        return []
    rows = inflight_page(queue, stuck_only=True, page=1, size=max(1, first["pg"].total))["rows"]
    return [(row["request"], row["entry"]) for row in rows if row["stuck"]]


def item_label(rid: str, entry: str) -> str:
    """What people know an item by: `#<index>` (its stream id when it is gone)."""
    try:
        item = client().item(rid, entry)
    except (QueueError, redis_lib.RedisError):  # a label must not break a page: the id says the same
        item = None
    index = (item or {}).get("index")
    return f"#{index}" if index not in (None, "") else entry
