"""The overview and queues pages: per-queue depth, in flight, dead letters
and throughput, a handful of round trips whatever the number of requests."""
from __future__ import annotations

import time

from queueadmin.core.engine.features import latency, ratelimit
from queueadmin.core.engine.client.queue_client import TERMINAL
from queueadmin.core.engine.store.packed import oldest_waiting, waiting_counts
from queueadmin.core.models import RequestRecord

from .base import SAMPLE, _int, keys, live_meta, queue_names, rdb
from .unrunnable import by_queue as unrunnable_by_queue
from .workers import workers

THROUGHPUT_MINUTES = 15
# Past SAMPLE live requests of a queue (base.py), the oldest SAMPLE are counted and the rest estimated
# from them: the page refreshes by itself, and one SORT of a million requests kept Redis busy for 5 s.


OVERVIEW_FIELDS = ("total", "done", "failed", "priority", "state", "discarded")
# read with them for the queue's latency (the age of the oldest waiting item: engine/features/latency.py)
SINCE_FIELDS = ("created_at", "not_before")


def _queue_counters(queue: str) -> tuple[list, list]:
    """Flat [total, done, failed, priority, state, discarded, ...] of the oldest SAMPLE live requests
    of a queue, and its (id, created_at, not_before) each: one SORT with GETs (no per-request round trips).
    Those waiting packed are left to their counts (queue_overview)."""
    rows = live_meta(queue, OVERVIEW_FIELDS + SINCE_FIELDS, limit=SAMPLE, counted=False)
    width = len(OVERVIEW_FIELDS)
    return [v for _, values in rows for v in values[:width]], [(rid, *values[width:]) for rid, values in rows]


def _oldest_waiting(flat: list, since: list, held_tokens: list[str]) -> float | None:
    """When the oldest item still waiting (not finished, not in flight, not scheduled) began to wait."""
    held: dict[str, int] = {}
    for t in held_tokens:
        rid = t.rpartition("#")[0]
        held[rid] = held.get(rid, 0) + 1
    starts = []
    for (rid, created, not_before), total, done, failed, state in zip(since, flat[0::6], flat[1::6], flat[2::6],
                                                                     flat[4::6]):
        if state in (None, "scheduled") or state in TERMINAL:
            continue
        if int(total or 0) - int(done or 0) - int(failed or 0) - held.get(rid, 0) > 0:
            starts.append(latency.waiting_since(_ms(created), _ms(not_before)))
    return latency.oldest(starts)


def _ms(value) -> float | None:
    return int(value) / 1000 if value else None


def queue_overview(name: str, held_tokens: list[str], config: dict) -> dict:
    """Depth by priority = items not finished, minus one per held token (an
    item in flight), by the request's priority. Dead letters of live requests
    = their failed count minus the discarded ones."""
    r, k = rdb(), keys()
    qk = k.queue(name)
    flat, since = _queue_counters(name)
    indexed = r.zcard(qk.index)
    live = indexed + max(0, len(since) - min(indexed, SAMPLE))  # and the unindexed read (in flight, parked)
    scale = live / len(since) if since and indexed >= SAMPLE else 1.0  # > 1: the rest estimated from the oldest SAMPLE
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
    if scale > 1:  # the requests not read are counted as the ones read, in proportion
        by_priority = {p: round(n * scale) for p, n in by_priority.items()}
        scheduled, failed_live = round(scheduled * scale), round(failed_live * scale)
        running, queued, sched_requests = (round(x * scale) for x in (running, queued, sched_requests))
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
    packed = waiting_counts(r, k, name)  # one-item requests waiting packed, counted by band (exact)
    for p, n in packed.items():
        by_priority[p] = by_priority.get(p, 0) + n
    queued, live = queued + sum(packed.values()), live + sum(packed.values())
    by_priority = {p: n for p, n in by_priority.items() if n > 0}
    oldest = latency.oldest([_oldest_waiting(flat, since, held_tokens), _ms(oldest_waiting(r, k, name, packed))])
    return {
        "estimated": scale > 1,  # the counts of a queue of more than SAMPLE live requests
        "live_requests": live,
        "sampled": len(since),
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
        "latency": latency.age(oldest),
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
        pipe.hgetall(qk.rate)
        ratelimit.pipe_stale(pipe, k, name)
    answers = iter(pipe.execute())
    queues = []
    totals = {"depth": 0, "in_flight": 0, "scheduled": 0, "dead": 0, "requests": 0}
    tp_all = [[0, 0] for _ in minutes]
    for name in names:
        config = next(answers)
        held_tokens = next(answers)  # "rid#k" tokens held by workers: one item in flight each
        tp = [next(answers) for _ in minutes]
        q = queue_overview(name, held_tokens, config)
        q["rate"] = ratelimit.summary(config, next(answers), next(answers))
        q["throughput"] = [(_int(d), _int(f)) for d, f in tp]
        q["throughput_last"] = sum(d + f for d, f in q["throughput"][-5:])
        for i, (d, f) in enumerate(q["throughput"]):
            tp_all[i][0] += d
            tp_all[i][1] += f
        for key in totals:
            totals[key] += q[key]
        totals["estimated"] = totals.get("estimated", False) or q["estimated"]
        queues.append(q)
    _add_finished_dead(queues, totals)
    waiting = unrunnable_by_queue(names, {q["name"]: q["config"] for q in queues})  # "no live worker has processor X"
    for q in queues:
        q["unrunnable"] = waiting.get(q["name"], [])
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
