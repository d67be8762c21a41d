"""One request (status, rates, a page of its items) and the history list's
live overlay."""
from __future__ import annotations

import re
import time

import redis as redis_lib

from queueadmin.core.engine.features import ratelimit
from queueadmin.core.engine.client.queue_client import TERMINAL
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.store.keys import GROUP
from queueadmin.core.models import RequestRecord

from .base import STUCK_GRACE_MS, _duration, _loads, _payload, _stream_id, client, keys, now_ms, rdb
from .workers import runs, workers

LIVE_STATES = ("scheduled", "queued", "running")


def status(rid: str) -> dict | None:
    return client().status(rid)


def with_rates(st: dict, now: float | None = None) -> dict:
    """Adds progress percentages, rate (items/s) and ETA (seconds) to a status."""
    now = now or time.time()
    total = st.get("total") or 0
    finished = st.get("done", 0) + st.get("failed", 0) + st.get("expired", 0)
    st["finished_items"] = finished
    st["remaining"] = max(0, total - finished)
    pct = lambda n: (100.0 * n / total) if total else 0.0  # noqa: E731
    st["pct_done"] = pct(st.get("done", 0))
    st["pct_failed"] = pct(st.get("failed", 0) + st.get("expired", 0))
    st["pct"] = pct(finished)
    started, ended = st.get("started_at"), st.get("finished_at")
    elapsed = ((ended or now) - started) if started else 0
    st["elapsed"] = elapsed
    st["rate"] = finished / elapsed if elapsed > 0 and finished else 0.0
    st["live"] = st.get("state") in LIVE_STATES
    # a live request of a paused queue waits, whatever its state says: no ETA to show (issue 22)
    st["paused"] = st["live"] and st.get("state") != "scheduled" and _queue_paused(st.get("queue"))
    st["eta"] = (st["remaining"] / st["rate"]) if st["rate"] and st["remaining"] and not ended \
        and not st["paused"] else None
    return st


def _queue_paused(queue) -> bool:
    """Whether `queue` is paused (its configuration, cached for 2 s by the client)."""
    if not queue:
        return False
    try:
        return client().queue_config(queue, max_age=2.0).paused
    except QueueError:  # a queue gone from Redis: nothing says it is paused
        return False


def overlay(records) -> list[dict]:
    """DB rows as dicts, with the live Redis status laid over the live ones."""
    rows = []
    live_ids = [rec.id for rec in records if rec.state in LIVE_STATES]
    live = dict(zip(live_ids, client().statuses(live_ids))) if live_ids else {}
    for rec in records:
        row = {
            "id": rec.id, "queue": rec.queue, "processor": rec.processor, "state": rec.state,
            "priority": rec.priority, "concurrency": rec.concurrency, "total": rec.total, "done": rec.done,
            "failed": rec.failed, "expired": rec.expired, "dedup_key": rec.dedup_key,
            "created_at": rec.created_at.timestamp() if rec.created_at else None,
            "started_at": rec.started_at.timestamp() if rec.started_at else None,
            "finished_at": rec.finished_at.timestamp() if rec.finished_at else None,
            "not_before": rec.not_before.timestamp() if rec.not_before else None,
            "in_flight": 0, "dead": 0, "from_redis": False,
        }
        st = live.get(rec.id)
        if st:
            for f in ("state", "priority", "concurrency", "total", "done", "failed", "expired", "started_at",
                      "finished_at", "in_flight", "dead"):
                row[f] = st.get(f, row[f])
            row["from_redis"] = True
        rows.append(with_rates(row))
    return rows


def request_view(rid: str) -> dict | None:
    """A request's status from Redis, or its last known summary from the DB."""
    st = client().status(rid)
    if st:
        st["in_redis"] = True
        st["throttle"] = _own_rate(rid, st)
        _split_in_flight(rid, st)
        return with_rates(st)
    rec = RequestRecord.objects.filter(id=rid).first()
    if rec is None:
        return None
    row = overlay([rec])[0]
    row["in_redis"] = False
    return row


def _split_in_flight(rid: str, st: dict) -> None:
    """Of the items the request holds (`in_flight`: its leases), those live
    workers report running (`running`, never more than its concurrency) and
    the others (`held_waiting`: waiting for a retry, or held by a dead
    worker until it is recovered): "in flight" counted both (issue 22)."""
    running = sum(1 for w in workers() if w["live"] for c in w["current"] if c["request"] == rid)
    st["running"] = min(running, st["in_flight"])
    st["held_waiting"] = st["in_flight"] - st["running"]


def _own_rate(rid: str, st: dict) -> dict | None:
    """A request's own rate limit and its use of the current window."""
    rate = ratelimit.parse(st.get("rate_limit") or "")
    if rate is None:
        return None
    used = 0 if st.get("state") in TERMINAL else ratelimit.usage(rdb(), keys(), st["queue"], [rid])[rid]
    return {"limit": rate.text, "used": used, "throttled": used >= rate.count}


def _entry_rows(rid: str, entries: list, lean: dict | None = None) -> list[dict]:
    """Item rows for stream entries (or a lean request's item, `lean` its
    fields): result, lease, worker and delivery count."""
    r, k = rdb(), keys()
    rk = k.request(rid)
    if not entries:
        return []
    ids = [e[0] for e in entries]
    idxs = [int(f.get("i", 0)) for _, f in entries]
    pipe = r.pipeline(transaction=False)
    pipe.hmget(rk.results, idxs)
    pipe.zmscore(rk.leases, ids)
    pipe.zmscore(rk.dead, ids)
    if lean is None:
        pipe.xpending_range(rk.items, GROUP, min=ids[0], max=ids[-1], count=len(ids) * 2 + 10)
        pipe.xinfo_groups(rk.items)
        results, leases, dead, pending, groups = pipe.execute()
    else:  # held while delivered and not acknowledged, like a stream's pending entry
        results, leases, dead = pipe.execute()
        pending = [{"message_id": lean["e"], "consumer": lean["h"], "times_delivered": int(lean.get("d") or 0)}
                   ] if lean.get("h") else []
        groups = []
    pend = {p["message_id"]: p for p in pending}
    last_delivered = groups[0]["last-delivered-id"] if groups else "0-0"
    live = {w["id"]: w for w in workers() if w["live"]}
    now = now_ms()
    rows = []
    for (eid, fields), idx, raw, lease, is_dead in zip(entries, idxs, results, leases, dead):
        rec = _loads(raw)
        p = pend.get(eid)
        status = rec.get("status") or "pending"
        row = {"entry": eid, "index": idx, "payload": _payload(fields.get("p")), "record": rec,
               "attempts": rec.get("attempts") or (p["times_delivered"] if p else 0),
               "worker": rec.get("worker", ""), "lease_deadline": lease / 1000 if lease else None,
               "result": rec.get("result"), "error": rec.get("error"), "traceback": rec.get("traceback"),
               "log": rec.get("log"),
               "duration": _duration(rec), "stuck": False}
        if p:  # delivered and not acknowledged: running, retrying, or stuck
            row["worker"] = p["consumer"]
            row["attempts"] = p["times_delivered"]
            running = runs(live, p["consumer"], eid)
            if status == "retrying" and not running:
                # its last attempt failed (or was stopped) and no live worker runs it: it waits for
                # its retry time, or is due and waits for a slot; "running" would sit beside its error
                status = "retrying"
            else:
                status = "running"
                row["duration"] = None
                row["progress"] = running  # its ctx.progress, if it reports one
                row["error"] = row["traceback"] = None  # an earlier attempt's: the item page lists attempts
            if lease is not None and lease < now - STUCK_GRACE_MS:
                row["stuck"] = True
            elif p["consumer"] not in live:
                row["stuck"] = True
        elif is_dead is not None:
            status = "failed"
        elif _stream_id(eid) > _stream_id(last_delivered):
            status = "pending" if status in ("pending", "retrying") else status
        elif status in ("pending", "retrying"):
            status = "retried"  # an older copy of an item that was sent back to run again
        row["status"] = status
        rows.append(row)
    return rows


STREAM_ID = re.compile(r"^(\d{1,20})-(\d{1,20})$")
LAST_PART = 2**64 - 1  # a stream id is two 64-bit numbers


def entry_cursor(value, end_ok: bool = False) -> str | None:
    """An item cursor (a stream entry id, or "$" for the last page when
    `end_ok`) as Redis takes it, or None for anything else: a bad cursor
    shows the first page instead of reaching Redis as an error."""
    if not isinstance(value, str):
        return None
    if value == "$":
        return value if end_ok else None
    m = STREAM_ID.match(value)
    if not m or int(m[1]) > LAST_PART or int(m[2]) > LAST_PART:
        return None
    return f"{int(m[1])}-{int(m[2])}"


def request_items(rid: str, after: str | None = None, before: str | None = None, size: int = 50) -> dict:
    """A page of a request's items in stream order, by cursor (entry ids), so
    any page costs the same however long the request is."""
    r = rdb()
    rk = keys().request(rid)
    size = max(1, min(500, size))
    after, before = entry_cursor(after, end_ok=True), entry_cursor(before)
    if before == "0-0" or after == f"{LAST_PART}-{LAST_PART}":
        after = before = None  # nothing lies beyond either end ("(0-0" is not a range Redis takes)
    lean = client().lean_item(rid)
    if lean is not None:  # one item, in a hash (core/engine/reads.py)
        on_page = lean and not before and (not after or after == "$")
        entries = [(lean["e"], {"i": lean["i"], "p": lean["p"]})] if on_page else []
        first = last = entries[0][0] if entries else None
        return {"rows": _entry_rows(rid, entries, lean), "length": 1 if lean else 0, "first": first, "last": last,
                "has_prev": False, "has_next": False, "size": size}
    if before:
        entries = list(reversed(r.xrevrange(rk.items, max=f"({before}", min="-", count=size)))
    elif after == "$":  # the last page
        entries = list(reversed(r.xrevrange(rk.items, max="+", min="-", count=size)))
    elif after:
        entries = r.xrange(rk.items, min=f"({after}", max="+", count=size)
    else:  # no cursor: where the request is now (its first item in flight, or the next to start)
        start = _now_entry(rid)
        entries = r.xrange(rk.items, min=start or "-", max="+", count=size)
        if start and len(entries) < size:  # near the end: a full last page (the newest items)
            entries = list(reversed(r.xrevrange(rk.items, max="+", min="-", count=size)))
    length = r.xlen(rk.items)
    rows = _entry_rows(rid, entries)
    first, last = (entries[0][0], entries[-1][0]) if entries else (None, None)
    has_prev = bool(first) and bool(r.xrevrange(rk.items, max=f"({first}", min="-", count=1))
    has_next = bool(last) and bool(r.xrange(rk.items, min=f"({last}", max="+", count=1))
    return {"rows": rows, "length": length, "first": first, "last": last, "has_prev": has_prev,
            "has_next": has_next, "size": size}


def _now_entry(rid: str) -> str | None:
    """The entry a live request's page opens on (issue 22: not on the oldest,
    finished items): the oldest of its items in flight, else the first not
    yet delivered; None for a request with neither (finished, or not
    started: its first page is where it is)."""
    r, rk = rdb(), keys().request(rid)
    pipe = r.pipeline(transaction=False)
    pipe.zrange(rk.leases, 0, 999)  # in flight (or waiting to retry): at most a concurrency's worth, mostly
    pipe.xinfo_groups(rk.items)
    try:
        held, groups = pipe.execute()
    except redis_lib.ResponseError:  # no stream (gone meanwhile)
        return None
    if held:
        return min(held, key=_stream_id)
    delivered = groups[0]["last-delivered-id"] if groups else "0-0"
    if delivered in ("0-0", None):
        return None
    following = r.xrange(rk.items, min=f"({delivered}", max="+", count=1)
    return following[0][0] if following else None


def results_iter(rid: str):
    return client().results(rid)
