"""Bulk operations by filter: `bulk_dead` (retry or discard the dead letters
a filter matches), `bulk_cancel`, `bulk_requeue`, `clear_queue`, and
`bulk_progress`. Each is a bulk job of bounded batches with its progress in
Redis (core/bulkjobs.py) whose batches apply the single operations of
core/operations.py, so every request touched gets the same history and
audit entries as if steered one by one.
"""
from __future__ import annotations

from collections import defaultdict

from queueadmin.core import audit, bulkjobs, queries
from queueadmin.core.audit import Actor
from queueadmin.core.engine.client.deadscan import DeadFilter
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.operations import cancel, discard, requeue, retry_dead


def bulk_dead(action: str, flt: DeadFilter, request: str | None = None, *, actor: Actor | None = None) -> str:
    """Retry or discard every dead letter `flt` matches (of one request, or
    all): a bulk job, started at once; returns its id."""
    expected, exact, rids = queries.dead_match(flt, request)
    jid = bulkjobs.jobs().create("dead", action, rids, flt=flt, expected=expected, exact=exact,
                                 actor=bulkjobs.actor_text(actor), label=f"{action} dead letters")
    return _started(jid, actor, f"bulk_{action}_dead", flt.queue, expected, {"filter": flt.to_json()}, exact=exact)


def bulk_cancel(rids, *, expected: int | None = None, label: str = "", actor: Actor | None = None) -> str:
    """Cancel every request of `rids` (a filter's matches: any iterable, read
    a chunk at a time), as a bulk job; `expected`: how many, if `rids` is no list."""
    n = len(rids) if expected is None else expected
    jid = bulkjobs.jobs().create("requests", "cancel", rids, expected=n, actor=bulkjobs.actor_text(actor),
                                 label=label or "cancel requests")
    return _started(jid, actor, "bulk_cancel", "", n, {"filter": label})


def bulk_requeue(pairs: list[tuple[str, str]], *, label: str = "", actor: Actor | None = None) -> str:
    """Requeue every in-flight item of `pairs` (a filter's matches), as a bulk job."""
    jid = bulkjobs.jobs().create("inflight", "requeue", (f"{r}:{e}" for r, e in pairs), expected=len(pairs),
                                 actor=bulkjobs.actor_text(actor), label=label or "requeue items")
    return _started(jid, actor, "bulk_requeue", "", len(pairs), {"filter": label})


def clear_queue(queue: str, *, actor: Actor | None = None) -> str:
    """Cancel every live request of `queue` (its waiting items never run), as a bulk job."""
    rids, waiting = queries.clear_targets(queue)
    jid = bulkjobs.jobs().create("clear", "cancel", rids, expected=len(rids), actor=bulkjobs.actor_text(actor),
                                 label=f"clear queue {queue}")
    return _started(jid, actor, "clear_queue", queue, waiting, {"requests": len(rids)}, size=len(rids))


def bulk_progress(jid: str) -> dict | None:
    """A bulk job's state and counts; a job whose runner is gone runs on here."""
    bulkjobs.resume_if_stale(jid, BULK_ACTS)
    return bulkjobs.jobs().get(jid)


def _started(jid: str, actor, action: str, queue: str, count: int, detail: dict, *, size: int | None = None,
             exact: bool = True) -> str:
    """Audit the job (`count`: the items it is to touch) and start it: one
    batch's worth (`size` targets, default `count`) at once, so the answer
    shows its result; more on a background thread (the page shows progress)."""
    audit.record(actor, action, queue=queue, target=f"bulk job {jid}", count=count, detail=detail)
    bulkjobs.start(jid, BULK_ACTS, wait=exact and (count if size is None else size) <= bulkjobs.INLINE)
    return jid


def _by_request(pairs: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for pair in pairs:
        rid, _, eid = pair.partition(":")
        out[rid].append(eid)
    return out


def _each(pairs: list[str], actor, op) -> tuple[int, int]:
    """(done, skipped) of `op(rid, entry ids, actor=...)` per request; a request
    that finished or went meanwhile is skipped, not an error of the job."""
    done = 0
    for rid, eids in _by_request(pairs).items():
        try:
            done += op(rid, eids, actor=actor)
        except QueueError:
            continue
    return done, len(pairs) - done


def _cancel_each(rids: list[str], actor) -> tuple[int, int]:
    done = 0
    for rid in rids:
        try:
            cancel(rid, actor=actor)
            done += 1
        except QueueError:  # finished meanwhile
            continue
    return done, len(rids) - done


def _requeue_all(pairs: list[str], actor) -> tuple[int, int]:
    n = requeue([tuple(p.partition(":")[::2]) for p in pairs], actor=actor)
    return n, len(pairs) - n


def _batched(act):
    """`act` with the audit entries of one batch written in one insert."""
    def run(targets, actor):
        with audit.batched():
            return act(targets, actor)
    return run


BULK_ACTS = {("dead", "retry"): _batched(lambda pairs, actor: _each(pairs, actor, retry_dead)),
             ("dead", "discard"): _batched(lambda pairs, actor: _each(pairs, actor, discard)),
             ("requests", "cancel"): _batched(_cancel_each), ("clear", "cancel"): _batched(_cancel_each),
             ("inflight", "requeue"): _batched(_requeue_all)}
