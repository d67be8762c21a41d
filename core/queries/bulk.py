"""Reads for the bulk actions by filter: what a queue-level clear would
cancel, and the bulk jobs' progress as the pages and the API show it."""
from __future__ import annotations

from .base import _int, live_meta

LIVE = ("scheduled", "queued", "running")


def clear_targets(queue: str) -> tuple[list[str], int]:
    """The live requests of `queue` (scheduled, queued, running) and how many
    of their items have not finished: what clearing it would cancel."""
    rids, waiting = [], 0
    for rid, (state, total, done, failed, expired) in live_meta(queue, ["state", "total", "done", "failed",
                                                                         "expired"]):
        if rid and state in LIVE:
            rids.append(rid)
            waiting += max(0, _int(total) - _int(done) - _int(failed) - _int(expired))
    return rids, waiting


def job_view(job: dict | None) -> dict | None:
    """A bulk job with what a page shows: percent done and a sentence."""
    if job is None:
        return None
    expected = job["expected"] or 0
    handled = job["done"] + job["skipped"]
    percent = 100 if job["over"] else (min(99, int(100 * handled / expected)) if expected else 0)
    return {**job, "percent": percent, "handled": handled}
