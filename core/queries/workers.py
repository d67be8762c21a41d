"""The workers page: the registry of worker processes.

A worker's hash (`Keys.worker(wid)`, written by its heartbeat) carries
`current`, a JSON list of the items it runs ({request, entry, index, started,
limit, kind}), its slots (`threads`/`threads_busy`, `tasks`/`tasks_busy`),
`recycled` (how many processes ran in its slot before), `state` (quiet or
stopping, as an operator asked: client/workers.py) and its counts. Older
workers write fewer fields: what is missing reads as unknown, never as an
error.
"""
from __future__ import annotations

import os
import socket
import time

from queueadmin.core import conf

from .base import _int, _loads, keys, now_ms, rdb


def _float(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f and abs(f) != float("inf") else None  # not NaN, not infinite


def _opt_int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def running_item(c, now: float) -> dict | None:
    """One entry of a worker's `current`, checked and with its elapsed time
    and whether it ran past its limit (None if the entry is unusable)."""
    if not isinstance(c, dict) or not isinstance(c.get("request"), str):
        return None
    started = _float(c.get("started"))
    limit = _float(c.get("limit")) or 0.0
    elapsed = max(0.0, now - started) if started else None
    return {"request": c["request"], "entry": str(c.get("entry") or ""), "index": _opt_int(c.get("index")),
            "started": started, "limit": max(0.0, limit), "kind": c.get("kind") if c.get("kind") in (
                "thread", "task") else "", "elapsed": elapsed,
            "over": bool(limit > 0 and elapsed is not None and elapsed > limit), **_progress(c)}


def _progress(c: dict) -> dict:
    """An item's own report (ctx.progress): a whole percent and a note."""
    value = _float(c.get("progress"))
    if value is None or not 0 <= value <= 1:
        return {"progress": None, "note": ""}
    return {"progress": int(value * 100), "note": str(c.get("note") or "")[:200]}


def _slots(info: dict, name: str) -> dict | None:
    total = _opt_int(info.get(name))
    if total is None:
        return None
    return {"total": total, "busy": _opt_int(info.get(f"{name}_busy")) or 0}


def workers(include_recovered: bool = False) -> list[dict]:
    """Registered workers (live, and dead ones not yet recovered), newest
    first. With include_recovered, also the dead workers another worker
    already recovered: the engine drops them from the registry zset and keeps
    their hash (flagged dead) for an hour, so they are found by SCAN; only
    the workers page asks for that."""
    r, k = rdb(), keys()
    now = now_ms()
    cutoff = now - int(conf.get("DEAD_AFTER_SECONDS") * 1000)
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
    wall = time.time()
    out = []
    for wid, info in zip(ids, infos):
        if not info:
            continue
        beat = _int(info.get("heartbeat"))
        pid = _int(info.get("pid"))
        gone = info.get("host") == host and pid and not _pid_alive(pid)
        dead = info.get("dead") == "1" or beat < cutoff or bool(gone)
        raw = _loads(info.get("current"), [])
        current = [c for c in (running_item(c, wall) for c in (raw if isinstance(raw, list) else [])) if c]
        label = short_id(wid)
        given = info.get("name") or ""
        out.append({"id": wid, "name": given or wid, "label": label,
                    "given": given if given not in (wid, label) else "",
                    "state": info.get("state", "") if info.get("state") in ("quiet", "stopping") and not dead else "",
                    "host": info.get("host", ""), "pid": pid,
                    "started": _int(info.get("started")) / 1000, "heartbeat": beat / 1000,
                    "queues": [q for q in (info.get("queues") or "").split(",") if q],
                    "current": current if not dead else [], "processed": _int(info.get("processed")),
                    "failed": _int(info.get("failed")), "live": not dead, "dead": dead,
                    "threads": _slots(info, "threads"), "tasks": _slots(info, "tasks"),
                    "recycled": _opt_int(info.get("recycled")),
                    "over_limit": sum(1 for c in current if c["over"]) if not dead else 0,
                    "heartbeat_age": max(0.0, (now - beat) / 1000)})
    out.sort(key=lambda w: (w["dead"], -w["started"]))
    return out


def short_id(wid: str) -> str:
    """The name every page shows for a worker: `host:pid` (its id without the
    random tail that tells apart a pid reused on a host); a --name given to
    the worker is shown beside it on the workers page."""
    parts = str(wid or "").split(":")
    return ":".join(parts[:2]) if len(parts) >= 3 else str(wid or "")


def runs(live: dict, wid: str, eid: str) -> dict | None:
    """The item `eid` as worker `wid` reports running it (None: not running there)."""
    w = live.get(wid)
    if not w:
        return None
    return next((c for c in w["current"] if c.get("entry") == eid), None)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True
