"""What workers can run, and the work that waits for a worker that can.

Each worker says which processors it can run: in its registry hash (`can`,
the names it has; `families`, the name prefixes it resolves on demand, such
as "task:"; `lacks`, the names it found it cannot load) and, for handoffs,
in its queues' `can` hashes (keys.py). A worker that took an item whose
processor it cannot load gives the item back untouched and marks the
request in its queue's `needs` hash ("since_ms|processor"); from then on
it passes over that request's tokens in its claims (cycle-18), and workers
that have the processor claim them as before. routing.py is the worker's
side of it.

`review` (every worker's upkeep) keeps the queue's `orphans` hash: for each
processor that marked requests wait for, since when no live worker of the
queue can run it. Past the queue's `unrunnable_seconds`, workers fail such
items with that reason, and the retry policy applies. `waiting` reads it
all for the dashboard and `queue_status`. No Django here.
"""
from __future__ import annotations

import time

from queueadmin.core.engine.runtime.processors import Processors

LACK_RETRY = 60.0  # seconds before a processor that could not be loaded here is tried again
SEP = "\n"  # between names in Redis (a script finds a name as SEP + name + SEP)


def joined(names) -> str:
    """Names as a script finds them: each between separators ("" for none)."""
    names = list(names)
    return SEP + SEP.join(names) + SEP if names else ""


def split(text: str | None) -> list[str]:
    return [n for n in (text or "").split(SEP) if n]


def now_ms() -> int:
    return int(time.time() * 1000)


class Abilities:
    """What this process can run: the names it has (its settings' map and the
    catalog), names resolved on demand (tasks) once they loaded, and the
    names it failed to load (tried again after LACK_RETRY). The dispatcher
    writes; the heartbeat thread reads: sets and dicts are replaced, never
    changed in place."""

    def __init__(self, processors: Processors):
        self.processors = processors
        self.ran: frozenset[str] = frozenset()  # loaded here, whatever their source
        self.lacks: dict[str, tuple[float, str]] = {}  # name -> (monotonic time it failed, why)

    def can_run(self, name: str) -> bool:
        if name in self.ran:
            return True
        failed = self.lacks.get(name)
        if failed is not None and time.monotonic() - failed[0] < LACK_RETRY:
            return False
        try:
            self.processors.get(name)
        except Exception as exc:  # unknown, not importable, or its module fails to load: not here
            self.lacks = {**self.lacks, name: (time.monotonic(), f"{type(exc).__name__}: {exc}")}
            return False
        self.lacks = {k: v for k, v in self.lacks.items() if k != name}
        self.ran = self.ran | {name}
        return True

    def retry_stale(self) -> None:
        """Load again the names that failed more than LACK_RETRY ago (a module
        deployed since, a failure that passed), touching no item: one that
        loads now is no longer passed over."""
        now = time.monotonic()
        for name, (failed, _) in list(self.lacks.items()):
            if now - failed >= LACK_RETRY:
                self.can_run(name)

    def why(self, name: str) -> str:
        return self.lacks.get(name, (0, ""))[1]

    def names(self) -> list[str]:
        """What this worker says it can run by name: what it has (presumed to
        load until it fails) and what it loaded, less what failed."""
        lacks = self.lacks
        return sorted((set(self.processors.names()) | self.ran) - set(lacks))

    def families(self) -> list[str]:
        return self.processors.catalog.prefixes()

    def registry_fields(self) -> dict[str, str]:
        return {"can": joined(self.names()), "families": joined(self.families()), "lacks": joined(sorted(self.lacks))}


def capable(info: dict, name: str) -> bool:
    """Whether a registered worker (its registry hash) says it can run `name`.
    One that says nothing about it (a version before this) is taken to."""
    if "can" not in info:
        return True
    if SEP + name + SEP in (info.get("lacks") or ""):
        return False
    return SEP + name + SEP in info["can"] or any(name.startswith(f) for f in split(info.get("families")))


def serving(workers: list[dict], queue: str) -> list[dict]:
    """The live workers (registry hashes with `live`) that serve `queue`."""
    return [w for w in workers if w.get("live") and queue in (w.get("queues") or "").split(",")]


def mark(pipe, qk, rid: str, processor: str) -> None:
    """Mark a request as waiting for a worker that has its processor (the first mark stays)."""
    pipe.hsetnx(qk.needs, rid, f"{now_ms()}|{processor}")


def parse_mark(value: str) -> tuple[int, str]:
    since, _, processor = value.partition("|")
    return int(since or 0), processor


def _read(client, queue: str) -> tuple[dict[str, tuple[int, str]], dict[str, int], list[str]]:
    """The marks of live requests (request id -> (since ms, processor)), the
    orphans, and the ids of marked requests that are gone."""
    qk = client.keys.queue(queue)
    pipe = client.redis.pipeline(transaction=False)
    pipe.hgetall(qk.needs)
    pipe.hgetall(qk.orphans)
    marks, orphans = pipe.execute()
    rids = list(marks)
    alive = []
    if rids:  # registered, or a one-item request waiting packed: its token alone (lua/_common.lua waiting_packed)
        pipe = client.redis.pipeline(transaction=False)
        pipe.hmget(qk.reqs, rids)
        pipe.zmscore(qk.tokens, [f"{rid}#1" for rid in rids])
        entries, scores = pipe.execute()
        alive = [e is not None or t is not None for e, t in zip(entries, scores)]
    live = {rid: parse_mark(marks[rid]) for rid, ok in zip(rids, alive) if ok}
    gone = [rid for rid, ok in zip(rids, alive) if not ok]
    return live, {p: int(v) for p, v in orphans.items()}, gone


def review(client, queue: str, workers: list[dict]) -> dict[str, int]:
    """Bring the queue's orphans up to date, and forget the marks of requests
    that are gone. Returns processor -> since when (ms) no live worker of the
    queue can run it, for the processors that marked requests wait for."""
    qk = client.keys.queue(queue)
    marks, orphans, gone = _read(client, queue)
    if not marks and not orphans and not gone:
        return {}
    now, able, out = now_ms(), serving(workers, queue), {}
    pipe = client.redis.pipeline(transaction=False)
    if gone:
        pipe.hdel(qk.needs, *gone)
    wanted = {processor for _, processor in marks.values()}
    for processor in wanted:
        if any(capable(w, processor) for w in able):
            if processor in orphans:
                pipe.hdel(qk.orphans, processor)
        else:
            out[processor] = orphans.get(processor, now)
            if processor not in orphans:
                pipe.hsetnx(qk.orphans, processor, now)
    stale = [p for p in orphans if p not in wanted]
    if stale:
        pipe.hdel(qk.orphans, *stale)
    pipe.execute()
    return out


def orphans(client, queue: str) -> dict[str, int]:
    """The queue's orphans as the last `review` left them: processor -> since (ms)."""
    return {p: int(v) for p, v in client.redis.hgetall(client.keys.queue(queue).orphans).items()}


def waiting(client, queue: str, workers: list[dict], unrunnable_seconds: float) -> list[dict]:
    """Work of `queue` that a worker could not run, by processor: how many
    requests, since when, the live workers that say they can run it (none:
    "no live worker has processor X") and, then, when its items fail."""
    marks, orphans, _ = _read(client, queue)
    able = serving(workers, queue)
    by_processor: dict[str, list[tuple[int, str]]] = {}
    for rid, (since, processor) in marks.items():
        by_processor.setdefault(processor, []).append((since, rid))
    out = []
    for processor, entries in sorted(by_processor.items()):
        entries.sort()
        orphaned = orphans.get(processor)
        ids = [w["id"] for w in able if capable(w, processor)]
        out.append({
            "processor": processor, "requests": len(entries), "request_ids": [rid for _, rid in entries[:20]],
            "since": entries[0][0] / 1000, "workers": ids,
            "orphaned_since": orphaned / 1000 if orphaned and not ids else None,
            "fails_at": orphaned / 1000 + unrunnable_seconds if orphaned and not ids else None,
            "message": (f"no live worker has processor {processor!r}" if not ids else
                        f"waits for the workers that have processor {processor!r} ({len(ids)} live)"),
        })
    return out


def request_wait(client, queue: str, rid: str, workers: list[dict], unrunnable_seconds: float) -> dict | None:
    """One request's entry of `waiting`, if a worker could not run it."""
    value = client.redis.hget(client.keys.queue(queue).needs, rid)
    if value is None:
        return None
    since, processor = parse_mark(value)
    for entry in waiting(client, queue, workers, unrunnable_seconds):
        if entry["processor"] == processor:
            return {**entry, "since": since / 1000}
    return None
