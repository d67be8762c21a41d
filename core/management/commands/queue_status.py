"""Show one request's state and progress, or an overview of every queue.

    python manage.py queue_status                 # queues and workers
    python manage.py queue_status REQUEST_ID      # one request
    python manage.py queue_status [REQUEST_ID] --json
"""
from __future__ import annotations

import json
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from queueadmin.core import clients, conf
from queueadmin.core.engine.features import history
from queueadmin.core.engine.store.keys import Keys
from queueadmin.core.models import Queue, RequestRecord
from queueadmin.core.queries import unrunnable
from queueadmin.core.queries.dead import counts_by_queue
from queueadmin.core.queries.workers import short_id

from ._cli import iso, user_errors

REQUEST_FIELDS = ("id", "queue", "processor", "state", "priority", "concurrency", "total", "done", "failed",
                  "in_flight")
EXTRA_FIELDS = ("expired", "dead", "finalized", "created_at", "not_before", "expires_at", "started_at",
                "finished_at")


def live_workers_info(redis, now_ms: int | None = None) -> list[dict]:
    """Every registered worker with a `live` flag (heartbeat within DEAD_AFTER_SECONDS)."""
    keys = Keys(conf.get("PREFIX"))
    dead_after_ms = float(conf.get("DEAD_AFTER_SECONDS")) * 1000
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    entries = redis.zrange(keys.workers, 0, -1, withscores=True)
    pipe = redis.pipeline(transaction=False)
    for wid, _ in entries:
        pipe.hgetall(keys.worker(wid))
    out = []
    for (wid, beat), info in zip(entries, pipe.execute() if entries else []):
        try:
            current = json.loads(info.get("current") or "[]")
        except ValueError:
            current = info.get("current")
        if isinstance(current, dict):
            current = [current]
        age = max(0.0, (now_ms - beat) / 1000)
        out.append({
            "id": wid, "name": short_id(wid), "given_name": info.get("name", "") if info.get("name") not in (
                wid, short_id(wid)) else "", "state": info.get("state", ""), "host": info.get("host", ""), "pid": int(info["pid"]) if info.get("pid", "").isdigit() else None,
            "queues": [q for q in (info.get("queues") or "").split(",") if q],
            "started": iso(info.get("started")), "heartbeat": iso(beat), "heartbeat_age": round(age, 3),
            "live": age * 1000 <= dead_after_ms and info.get("dead") != "1",
            "current": current or [],
        })
    return out


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}s"


def configured_only(known: set[str]) -> list[str]:
    """Queues configured in the database that Redis does not know yet (read,
    not pushed: a read command writes nothing)."""
    try:
        return sorted(Queue.objects.exclude(name__in=known).values_list("name", flat=True))
    except DatabaseError:  # no database yet: Redis's view is all there is
        return []


def dead_counts() -> dict[str, int]:
    """Dead letters per queue as the Dead letters page counts them (finished
    requests' too); without a database, {}: live requests' only."""
    try:
        return counts_by_queue()
    except DatabaseError:
        return {}


def unrunnable_line(u: dict, one: bool = False) -> str:
    """One line on work a worker could not run (core/engine/abilities.py
    waiting): a queue's, or (`one`) a request's."""
    line = f"{u['message']}: {'waiting' if one else str(u['requests']) + ' request(s) waiting'} since {iso(u['since'])}"
    return line + (f"; items fail at {iso(u['fails_at'])}" if u.get("fails_at") else "")


class Command(BaseCommand):
    help = "Show a request's state and progress, or (without an id) every queue's depth, in-flight work and workers."
    # No system checks: they would import every URLconf and view on each call;
    # `manage.py check` and `migrate` still run them.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("request_id", nargs="?", help="a request id (omit for the queue overview)")
        parser.add_argument("--json", action="store_true", help="print JSON instead of text")

    def handle(self, *args, **options):
        with user_errors():  # reads only: works while Redis refuses writes (full, read-only)
            if options["request_id"]:
                data = self.request_status(options["request_id"])
            else:
                data = self.overview()
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2, ensure_ascii=False))
        elif options["request_id"]:
            self.print_request(data)
        else:
            self.print_overview(data)

    # -- one request ------------------------------------------------------------

    def request_status(self, rid: str) -> dict:
        st = clients.engine().status(rid)
        if st is not None:
            out = {f: st.get(f) for f in REQUEST_FIELDS}
            for f in EXTRA_FIELDS:
                value = st.get(f)
                out[f] = iso(value) if f.endswith("_at") or f == "not_before" else value
            out["source"] = "redis"
            # a worker lacked its processor (core/engine/runtime/routing.py)
            out["waiting_for"] = unrunnable.for_request(st)
            return out
        # finished and cleaned up from Redis: the summary remains
        rec = RequestRecord.objects.filter(id=rid).first()
        if rec is None:
            raise CommandError(f"unknown request {rid!r}")
        out = {f: getattr(rec, f, None) for f in REQUEST_FIELDS if f != "in_flight"}
        out["in_flight"] = 0
        out["expired"] = rec.expired
        for f in ("created_at", "not_before", "expires_at", "started_at", "finished_at"):
            value = getattr(rec, f)
            out[f] = iso(value.timestamp()) if value else None
        out["source"] = "database"
        return out

    def print_request(self, data: dict) -> None:
        width = max(len(k) for k in data)
        for key, value in data.items():
            if value is None:
                value = "-"
            elif isinstance(value, bool):
                value = "yes" if value else "no"
            elif key == "waiting_for":
                value = unrunnable_line(value, one=True)
            self.stdout.write(f"{key + ':':<{width + 1}} {value}")

    # -- every queue --------------------------------------------------------------

    def overview(self) -> dict:
        client = clients.engine()
        workers = live_workers_info(client.redis)
        queues, dead_letters = [], dead_counts()
        for name in client.queues():
            stats = client.queue_stats(name)
            serving = [w["id"] for w in workers if w["live"] and (name in w["queues"] or not w["queues"])]
            hour = history.recent(client.redis, client.keys, [history.queue_series(name)])
            queues.append({
                "queue": name, "paused": stats["paused"], "requests": stats["requests"], "depth": stats["depth"],
                "depth_by_priority": {str(p): n for p, n in stats["depth_by_priority"].items()},
                "in_flight": stats["in_flight"], "scheduled": stats["scheduled"], "dead_letters": dead_letters.get(name, stats["dead"]),
                "live_workers": len(serving), "workers": serving,
                "latency_seconds": round(stats["latency"], 3), "wait_p50_seconds": _r(hour.wait_p(0.5)),
                "wait_p95_seconds": _r(hour.wait_p(0.95)),
            })
        waiting = unrunnable.by_queue([q["queue"] for q in queues])
        for q in queues:
            q["waiting_for_workers"] = waiting.get(q["queue"], [])
        for name in configured_only({q["queue"] for q in queues}):
            queues.append({"queue": name, "paused": False, "requests": 0, "depth": 0, "depth_by_priority": {},
                           "in_flight": 0, "scheduled": 0, "dead_letters": 0, "live_workers": 0, "workers": [],
                           "latency_seconds": 0.0, "wait_p50_seconds": None, "wait_p95_seconds": None,
                           "not_in_redis": True})
        return {"queues": queues, "workers": workers,
                "live_workers": sum(1 for w in workers if w["live"])}

    def print_overview(self, data: dict) -> None:
        w = self.stdout.write
        if not data["queues"]:
            w("no queues")
        for q in data["queues"]:
            by_prio = ", ".join(f"p{p}: {n}" for p, n in q["depth_by_priority"].items()) or "-"
            if q.get("not_in_redis"):
                w(f"queue {q['queue']}  [configured; not in Redis until a worker starts or a request is submitted]")
                continue
            w(f"queue {q['queue']}{'  [PAUSED]' if q['paused'] else ''}")
            w(f"  requests:     {q['requests']}")
            w(f"  waiting:      {q['depth']}  (by priority: {by_prio})")
            w(f"  latency:      {q['latency_seconds']:.1f}s  (oldest waiting item; wait p50 "
              f"{_secs(q['wait_p50_seconds'])}, p95 {_secs(q['wait_p95_seconds'])} in the last hour)")
            w(f"  in flight:    {q['in_flight']}")
            w(f"  scheduled:    {q['scheduled']}")
            w(f"  dead letters: {q['dead_letters']}")
            w(f"  live workers: {q['live_workers']}")
            for u in q["waiting_for_workers"]:
                w(f"  {unrunnable_line(u)}")
        live = [x for x in data["workers"] if x["live"]]
        dead = [x for x in data["workers"] if not x["live"]]
        w(f"workers: {len(live)} live" + (f", {len(dead)} dead" if dead else ""))
        for x in live + dead:
            current = ", ".join(f"{c.get('request')}#{c.get('index')}" for c in x["current"]
                                if isinstance(c, dict)) or "idle"
            state = ("live" + (f" {x['state']}" if x["state"] else "")) if x["live"] else "DEAD"
            w(f"  {x['id']}  {state}  host={x['host']} pid={x['pid']} queues={','.join(x['queues']) or '*'} "
              f"heartbeat={x['heartbeat_age']:.1f}s ago  current={current}")
