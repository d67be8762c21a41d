"""The dashboard's read layer: every page reads Redis through here.

Reads are pipelined (one round trip per page section, never one per row),
and the per-request counters of a whole queue are fetched with a single
`SORT <index> BY nosort GET ...` (the request ids of a queue sit in its
`index` zset; their counters in each request's meta hash). That keeps the
overview fast with tens of thousands of live requests. SORT cannot GET keys
of other slots on Redis Cluster, so on an error it falls back to a pipeline
of HMGETs (slower, same answer).

No Django views or templates here; the database is read only for history
(RequestRecord) and queue configuration.
"""
from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import dataclass

import redis as redis_lib
from django.conf import settings

from core import services
from core.engine import schedule
from core.engine.client import TERMINAL, parse_status
from core.engine.keys import GROUP

THROUGHPUT_MINUTES = 15
META_FIELDS = ("total", "done", "failed", "expired", "priority", "state", "discarded", "processor")
LIVE_STATES = ("scheduled", "queued", "running")
STUCK_GRACE_MS = 250  # a lease this far past its deadline with nobody on it is stuck


def now_ms() -> int:
    return int(time.time() * 1000)


def client():
    return services.engine()


def rdb():
    return services.engine().redis


def keys():
    return services.engine().keys


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
    from core.models import Queue

    names = client().queues()
    known = set(names)
    missing = [q for q in Queue.objects.exclude(name__in=names)] if names else list(Queue.objects.all())
    for q in missing:
        if q.name not in known:
            client().define_queue(q.name, q.to_config())
            names.append(q.name)
    return sorted(names)


def _bulk_meta(index_key: str, request_key) -> list[tuple[str, dict]]:
    """(id, counters) of every request in a queue's index zset, in one command."""
    r = rdb()
    sample = request_key("*")
    gets = ["#"] + [f"{sample}->{f}" for f in META_FIELDS]
    try:
        flat = r.sort(index_key, by="nosort", get=gets)
    except redis_lib.RedisError:  # Redis Cluster: no GET across slots (CROSSSLOT)
        rids = r.zrange(index_key, 0, -1)
        pipe = r.pipeline(transaction=False)
        for rid in rids:
            pipe.hmget(request_key(rid), *META_FIELDS)
        flat = []
        for rid, values in zip(rids, pipe.execute()):
            flat.append(rid)
            flat.extend(values)
    width = len(gets)
    out = []
    for i in range(0, len(flat), width):
        row = flat[i:i + width]
        if row[0] is None or row[1] is None:  # meta gone (cleaned up meanwhile)
            continue
        out.append((row[0], dict(zip(META_FIELDS, row[1:]))))
    return out


def _int(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


OVERVIEW_FIELDS = ("total", "done", "failed", "priority", "state", "discarded")


def _queue_counters(index_key: str, request_key) -> list:
    """Flat [total, done, failed, priority, state, discarded, ...] of every live request of
    a queue: one SORT with GETs (no per-request round trips, no ids needed)."""
    r = rdb()
    sample = request_key("*")
    try:
        return r.sort(index_key, by="nosort", get=[f"{sample}->{f}" for f in OVERVIEW_FIELDS])
    except redis_lib.RedisError:  # Redis Cluster: no GET across slots (CROSSSLOT)
        pipe = r.pipeline(transaction=False)
        for rid in r.zrange(index_key, 0, -1):
            pipe.hmget(request_key(rid), *OVERVIEW_FIELDS)
        return [v for values in pipe.execute() for v in values]


def queue_overview(name: str, held_tokens: list[str], config: dict) -> dict:
    """Depth by priority = items not finished, minus one per held token (an
    item in flight), by the request's priority. Dead letters of live requests
    = their failed count minus the discarded ones."""
    r, k = rdb(), keys()
    qk = k.queue(name)
    flat = _queue_counters(qk.index, lambda rid: k.request(rid).meta)
    by_priority: dict[int, int] = {}
    scheduled = failed_live = running = queued = sched_requests = 0
    terminal = set(TERMINAL)
    for total, done, failed, prio, state, discarded in zip(flat[0::6], flat[1::6], flat[2::6], flat[3::6],
                                                          flat[4::6], flat[5::6]):
        if state is None or state in terminal:
            continue
        if state == "scheduled":
            scheduled += int(total or 0)
            sched_requests += 1
            continue
        left = int(total or 0) - int(done or 0) - int(failed or 0)
        if failed and failed != "0":
            failed_live += int(failed) - int(discarded or 0)
        if left > 0:
            p = int(prio or 0)
            by_priority[p] = by_priority.get(p, 0) + left
        if state == "running":
            running += 1
        else:
            queued += 1
    in_flight = len(held_tokens)
    if held_tokens:
        rids = list({t.rpartition("#")[0] for t in held_tokens})
        prio_of = dict(zip(rids, r.hmget(qk.reqs, rids)))
        for t in held_tokens:
            v = prio_of.get(t.rpartition("#")[0])
            if v:
                p = int(v.split("|")[0])
                if by_priority.get(p):
                    by_priority[p] -= 1
    by_priority = {p: n for p, n in by_priority.items() if n > 0}
    return {
        "name": name,
        "paused": config.get("paused") in ("1", "True", "true"),
        "config": config,
        "requests": running + queued,
        "running_requests": running,
        "queued_requests": queued,
        "scheduled_requests": sched_requests,
        "depth": sum(by_priority.values()),
        "depth_by_priority": sorted(by_priority.items(), reverse=True),
        "in_flight": in_flight,
        "scheduled": scheduled,
        "dead": failed_live,
    }


def overview() -> dict:
    """Everything the overview page shows, in a handful of round trips."""
    r, k = rdb(), keys()
    names = queue_names()
    minute = int(time.time() // 60)
    minutes = list(range(minute - THROUGHPUT_MINUTES + 1, minute + 1))
    pipe = r.pipeline(transaction=False)
    for name in names:
        qk = k.queue(name)
        pipe.hgetall(qk.config)
        pipe.hkeys(qk.held)
        for m in minutes:
            pipe.hmget(k.throughput(name, m), "done", "failed")
    answers = iter(pipe.execute())
    queues = []
    totals = {"depth": 0, "in_flight": 0, "scheduled": 0, "dead": 0, "requests": 0}
    tp_all = [[0, 0] for _ in minutes]
    for name in names:
        config = next(answers)
        held_tokens = next(answers)  # "rid#k" tokens held by workers: one item in flight each
        tp = [next(answers) for _ in minutes]
        q = queue_overview(name, held_tokens, config)
        q["throughput"] = [(_int(d), _int(f)) for d, f in tp]
        q["throughput_last"] = sum(d + f for d, f in q["throughput"][-5:])
        for i, (d, f) in enumerate(q["throughput"]):
            tp_all[i][0] += d
            tp_all[i][1] += f
        for key in totals:
            totals[key] += q[key]
        queues.append(q)
    _add_finished_dead(queues, totals)
    live = [w for w in workers() if w["live"]]
    return {
        "queues": queues, "totals": totals, "throughput": [tuple(x) for x in tp_all],
        "throughput_minutes": minutes, "workers_live": len(live),
        "workers_busy": sum(1 for w in live if w["current"]),
        "generated_at": time.time(),
    }


def _add_finished_dead(queues: list[dict], totals: dict) -> None:
    """Dead letters of finished requests still retained in Redis (from the DB's
    history: recent requests with failures), counted with one pipelined ZCARD."""
    from core.models import RequestRecord

    by_name = {q["name"]: q for q in queues}
    rows = list(RequestRecord.objects.filter(failed__gt=0, state__in=TERMINAL)
                .order_by("-created_at").values_list("id", "queue")[:2000])
    if not rows:
        return
    pipe = rdb().pipeline(transaction=False)
    for rid, _ in rows:
        pipe.zcard(keys().request(rid).dead)
    for (rid, queue), n in zip(rows, pipe.execute()):
        if n and queue in by_name:
            by_name[queue]["dead"] += n
            totals["dead"] += n


def queues_detail() -> list[dict]:
    """Queue configuration as Redis has it (what workers read), with live counts."""
    data = overview()
    return data["queues"]


# -- requests -----------------------------------------------------------------------


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
    st["eta"] = (st["remaining"] / st["rate"]) if st["rate"] and st["remaining"] and not ended else None
    st["live"] = st.get("state") in LIVE_STATES
    return st


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
    from core.models import RequestRecord

    st = client().status(rid)
    if st:
        st["in_redis"] = True
        return with_rates(st)
    rec = RequestRecord.objects.filter(id=rid).first()
    if rec is None:
        return None
    row = overlay([rec])[0]
    row["in_redis"] = False
    return row


def _entry_rows(rid: str, entries: list) -> list[dict]:
    """Item rows for stream entries: result, lease, worker and delivery count."""
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
    pipe.xpending_range(rk.items, GROUP, min=ids[0], max=ids[-1], count=len(ids) * 2 + 10)
    pipe.xinfo_groups(rk.items)
    results, leases, dead, pending, groups = pipe.execute()
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
               "duration": _duration(rec), "stuck": False}
        if p:  # delivered and not acknowledged: running, retrying, or stuck
            row["worker"] = p["consumer"]
            row["attempts"] = p["times_delivered"]
            if status == "retrying" and lease and lease > now and not _runs(live, p["consumer"], eid):
                status = "retrying"
            else:
                status = "running"
                row["duration"] = None
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


def _runs(live: dict, wid: str, eid: str) -> bool:
    w = live.get(wid)
    return bool(w) and any(c.get("entry") == eid for c in w["current"])


def request_items(rid: str, after: str | None = None, before: str | None = None, size: int = 50) -> dict:
    """A page of a request's items in stream order, by cursor (entry ids), so
    any page costs the same however long the request is."""
    r = rdb()
    rk = keys().request(rid)
    size = max(1, min(500, size))
    if before:
        entries = list(reversed(r.xrevrange(rk.items, max=f"({before}", min="-", count=size)))
    elif after == "$":  # the last page
        entries = list(reversed(r.xrevrange(rk.items, max="+", min="-", count=size)))
    elif after:
        entries = r.xrange(rk.items, min=f"({after}", max="+", count=size)
    else:
        entries = r.xrange(rk.items, min="-", max="+", count=size)
    length = r.xlen(rk.items)
    rows = _entry_rows(rid, entries)
    first, last = (entries[0][0], entries[-1][0]) if entries else (None, None)
    has_prev = bool(first) and bool(r.xrevrange(rk.items, max=f"({first}", min="-", count=1))
    has_next = bool(last) and bool(r.xrange(rk.items, min=f"({last}", max="+", count=1))
    return {"rows": rows, "length": length, "first": first, "last": last, "has_prev": has_prev,
            "has_next": has_next, "size": size}


def results_iter(rid: str):
    return client().results(rid)


# -- in flight ------------------------------------------------------------------


def inflight(queue: str | None = None, limit: int = 5000) -> list[dict]:
    """Items delivered and not yet acknowledged, in every running request."""
    r, k = rdb(), keys()
    names = [queue] if queue else queue_names()
    candidates = []
    for name in names:
        for rid, m in _bulk_meta(k.queue(name).index, lambda rid: k.request(rid).meta):
            if m["state"] == "running" or (m["state"] not in TERMINAL and _int(m["done"]) + _int(m["failed"])):
                candidates.append((name, rid, m))
    if not candidates:
        return []
    pipe = r.pipeline(transaction=False)
    for _, rid, _ in candidates:
        pipe.zrange(k.request(rid).leases, 0, -1, withscores=True)
    leases_of = pipe.execute()
    wanted = [(c, lz) for c, lz in zip(candidates, leases_of) if lz]
    if not wanted:
        return []
    pipe = r.pipeline(transaction=False)
    for (name, rid, m), lz in wanted:
        rk = k.request(rid)
        pipe.xpending_range(rk.items, GROUP, min="-", max="+", count=len(lz) + 10)
        pipe.hgetall(k.queue(name).config)
    answers = iter(pipe.execute())
    live = {w["id"]: w for w in workers() if w["live"]}
    now = now_ms()
    rows, need = [], []
    for (name, rid, m), lz in wanted:
        pend = {p["message_id"]: p for p in next(answers)}
        lease_ms = int(float(next(answers).get("lease_seconds", 60)) * 1000)
        for eid, deadline in lz:
            p = pend.get(eid)
            if not p:
                continue
            wid = p["consumer"]
            running = _runs(live, wid, eid)
            started = None
            w = live.get(wid)
            if running:
                started = next((c.get("started") for c in w["current"] if c.get("entry") == eid), None)
            dead_worker = wid not in live
            expired = deadline < now - STUCK_GRACE_MS
            row = {"queue": name, "request": rid, "processor": m.get("processor") or "", "entry": eid,
                   "worker": wid, "attempts": p["times_delivered"], "deadline": deadline / 1000,
                   "started": started or (deadline - lease_ms) / 1000, "running": running,
                   "dead_worker": dead_worker, "lease_expired": expired,
                   "stuck": dead_worker or expired, "waiting_retry": False, "priority": _int(m["priority"])}
            rows.append(row)
            need.append(row)
            if len(rows) >= limit:
                break
    # payload, index and last record of each row
    pipe = r.pipeline(transaction=False)
    for row in need:
        pipe.xrange(k.request(row["request"]).items, row["entry"], row["entry"])
    entries = pipe.execute()
    pipe = r.pipeline(transaction=False)
    for row, e in zip(need, entries):
        row["index"] = int(e[0][1]["i"]) if e else None
        row["payload"] = _payload(e[0][1]["p"]) if e else None
        pipe.hget(k.request(row["request"]).results, row["index"] if row["index"] is not None else -1)
    for row, raw in zip(need, pipe.execute()):
        rec = _loads(raw)
        row["error"] = rec.get("error")
        if rec.get("status") == "retrying" and not row["running"] and row["deadline"] * 1000 > now:
            row["waiting_retry"] = True
            row["stuck"] = False  # any token holder of the request redelivers it when due
    for row in rows:
        row["age"] = max(0.0, time.time() - row["started"])
    rows.sort(key=lambda x: (not x["stuck"], x["started"]))
    return rows


# -- dead letters --------------------------------------------------------------------


def dead_letters(queue: str | None = None, request: str | None = None, limit: int = 5000) -> list[dict]:
    """Dead-lettered items of live requests and of finished ones still in Redis."""
    from core.models import RequestRecord

    r, k = rdb(), keys()
    candidates: dict[str, str] = {}
    if request:
        st = r.hget(k.request(request).meta, "queue")
        if st:
            candidates[request] = st
    else:
        for name in ([queue] if queue else queue_names()):
            for rid, m in _bulk_meta(k.queue(name).index, lambda rid: k.request(rid).meta):
                if _int(m["failed"]):
                    candidates[rid] = name
        qs = RequestRecord.objects.filter(failed__gt=0)
        if queue:
            qs = qs.filter(queue=queue)
        for rid, name in qs.order_by("-created_at").values_list("id", "queue")[:2000]:
            candidates.setdefault(rid, name)
    if not candidates:
        return []
    rids = list(candidates)
    pipe = r.pipeline(transaction=False)
    for rid in rids:
        pipe.zrange(k.request(rid).dead, 0, -1, withscores=True)
        pipe.hmget(k.request(rid).meta, "processor", "state")
    answers = pipe.execute()
    pairs = []
    for i, rid in enumerate(rids):
        dz, (processor, state) = answers[2 * i], answers[2 * i + 1]
        for eid, at in dz:
            pairs.append((rid, eid, at, processor or "", state or ""))
    pairs.sort(key=lambda x: x[1])  # entry order within a request (= item order)
    pairs.sort(key=lambda x: x[0], reverse=True)  # newest request first (ids sort by creation time)
    pairs = pairs[:limit]
    pipe = r.pipeline(transaction=False)
    for rid, eid, *_ in pairs:
        pipe.xrange(k.request(rid).items, eid, eid)
    entries = pipe.execute()
    pipe = r.pipeline(transaction=False)
    for (rid, *_), e in zip(pairs, entries):
        pipe.hget(k.request(rid).results, int(e[0][1]["i"]) if e else -1)
    records = pipe.execute()
    out = []
    for (rid, eid, at, processor, state), e, raw in zip(pairs, entries, records):
        if not e:
            continue
        rec = _loads(raw)
        out.append({"request": rid, "queue": candidates[rid], "processor": processor, "request_state": state,
                    "entry": eid, "index": int(e[0][1]["i"]), "payload": _payload(e[0][1]["p"]),
                    "dead_at": at / 1000, "error": rec.get("error") or "", "traceback": rec.get("traceback") or "",
                    "attempts": rec.get("attempts"), "worker": rec.get("worker", "")})
    return out


# -- scheduled ----------------------------------------------------------------------


def scheduled(queue: str | None = None) -> list[dict]:
    r, k = rdb(), keys()
    rows = []
    for name in ([queue] if queue else queue_names()):
        due = schedule.entries(services.engine(), name, 5000)  # near-term `sched` and the far-off shards
        if not due:
            continue
        pipe = r.pipeline(transaction=False)
        for rid, _ in due:
            pipe.hmget(k.request(rid).meta, "processor", "priority", "concurrency", "total", "created_at",
                       "expires_at", "dedup_key", "state")
        for (rid, at), (proc, prio, conc, total, created, expires, dkey, state) in zip(due, pipe.execute()):
            if state in TERMINAL:
                continue  # cancelled while far off: its shard entry goes when its time is near
            rows.append({"request": rid, "queue": name, "start_at": at / 1000, "processor": proc or "",
                         "priority": _int(prio), "concurrency": _int(conc), "total": _int(total),
                         "created_at": _int(created) / 1000 if created else None,
                         "expires_at": _int(expires) / 1000 if expires else None, "dedup_key": dkey or "",
                         "state": state or "?"})
    rows.sort(key=lambda x: x["start_at"])
    return rows


# -- workers ----------------------------------------------------------------------


def workers(include_recovered: bool = False) -> list[dict]:
    """Registered workers (live, and dead ones not yet recovered), newest
    first. With include_recovered, also the dead workers another worker
    already recovered: the engine drops them from the registry zset and keeps
    their hash (flagged dead) for an hour, so they are found by SCAN; only
    the workers page asks for that."""
    r, k = rdb(), keys()
    conf = settings.QUEUEADMIN
    now = now_ms()
    cutoff = now - int(conf["DEAD_AFTER_SECONDS"] * 1000)
    ids = r.zrange(k.workers, 0, -1)
    if include_recovered:
        seen = set(ids)
        prefix = k.worker("")
        ids += [key[len(prefix):] for key in r.scan_iter(match=k.worker("*"), count=5000)
                if key[len(prefix):] not in seen]
    pipe = r.pipeline(transaction=False)
    for wid in ids:
        pipe.hgetall(k.worker(wid))
    infos = pipe.execute()
    host = socket.gethostname()
    out = []
    for wid, info in zip(ids, infos):
        if not info:
            continue
        beat = _int(info.get("heartbeat"))
        pid = _int(info.get("pid"))
        gone = info.get("host") == host and pid and not _pid_alive(pid)
        dead = info.get("dead") == "1" or beat < cutoff or bool(gone)
        current = _loads(info.get("current"), [])
        out.append({"id": wid, "name": info.get("name") or wid, "host": info.get("host", ""), "pid": pid,
                    "started": _int(info.get("started")) / 1000, "heartbeat": beat / 1000,
                    "queues": [q for q in (info.get("queues") or "").split(",") if q],
                    "current": current if not dead else [], "processed": _int(info.get("processed")),
                    "failed": _int(info.get("failed")), "live": not dead, "dead": dead,
                    "heartbeat_age": max(0.0, (now - beat) / 1000)})
    out.sort(key=lambda w: (w["dead"], -w["started"]))
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


# -- helpers -----------------------------------------------------------------------


def _loads(raw, default=None):
    if not raw:
        return {} if default is None else default
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return {"status": "corrupt", "error": "unreadable record in Redis"} if default is None else default


def _payload(raw):
    if raw is None:
        return None
    try:
        return json.loads(raw)
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


__all__ = ["Page", "overview", "request_view", "request_items", "inflight", "dead_letters", "scheduled",
           "workers", "overlay", "queue_names", "parse_status"]
