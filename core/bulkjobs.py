"""Bulk jobs by filter, the Django side: where they run and who they act as.

The engine keeps a job's targets, cursor and counts in Redis and runs it
batch by batch (core/engine/client/bulk.py); this module runs it on a
background thread of the web process, so that the page that started it
answers at once and shows progress. A web process that ends mid-job loses
only its thread: the job's runner lease lapses (30 s) and the next look at
the job (`resume_if_stale`, called when its progress is read, by the page or
the API) runs it on from its saved cursor. Workers could run jobs instead,
but a job must not wait behind the queue's own work, and a queue with no
worker may well be the one an operator is clearing.

The acting functions are core/operations.py's, passed in (`acts`), so this
module does not import operations: operations imports it.
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Callable

from django.contrib.auth import get_user_model
from django.db import close_old_connections, connections

from queueadmin.core import clients
from queueadmin.core.audit import Actor
from queueadmin.core.engine.client.bulk import BATCH, BulkJobs, BulkRun
from queueadmin.core.engine.client.deadscan import DeadScan

log = logging.getLogger(__name__)
INLINE = BATCH  # a job expected to fit one batch runs in the request that asked for it

# (kind, action) -> a function of (targets, actor) -> (done, skipped)
Acts = dict[tuple[str, str], Callable[[list[str], Actor | None], tuple[int, int]]]


def jobs() -> BulkJobs:
    eng = clients.engine()
    return BulkJobs(eng.redis, eng.keys)


def dead_scan() -> DeadScan:
    eng = clients.engine()
    return DeadScan(eng.store, eng.reads)


def actor_text(actor: Actor | None) -> str:
    """An actor as a job keeps it (its user by id: the job may outlive the process)."""
    if actor is None:
        return ""
    user = getattr(actor.user, "pk", None)
    return json.dumps({"who": actor.who, "source": actor.source, "user": user})


def actor_of(text: str) -> Actor | None:
    if not text:
        return None
    try:
        data = json.loads(text)
        user = get_user_model().objects.filter(pk=data["user"]).first() if data.get("user") is not None else None
        return Actor(str(data["who"]), str(data["source"]), user)
    except (ValueError, KeyError, TypeError):  # a job written by another version: acted on as the system
        return None


def start(jid: str, acts: Acts, *, wait: bool = False) -> None:
    """Run job `jid` on a thread of this process (`wait`: here, to its end)."""
    if wait:
        _run(jid, acts)
        return
    threading.Thread(target=_run_on_thread, args=(jid, acts), name=f"bulk-{jid}", daemon=True).start()


def resume_if_stale(jid: str, acts: Acts) -> bool:
    """Run on a job that nobody runs any more; True if this process took it."""
    if not jobs().stale(jid):
        return False
    log.info("bulk job %s: its runner is gone, resuming from its cursor", jid)
    start(jid, acts)
    return True


def _run(jid: str, acts: Acts) -> dict | None:
    store = jobs()
    job = store.get(jid)
    if not job:
        return None
    act = acts[(job["kind"], job["action"])]
    actor = actor_of(job.get("actor", ""))
    return BulkRun(store, dead_scan(), jid, lambda batch: act(batch, actor)).run()


def _run_on_thread(jid: str, acts: Acts) -> None:
    close_old_connections()
    try:
        _run(jid, acts)
    except Exception:  # the job records its own failure; this is Redis or the database gone meanwhile
        log.exception("bulk job %s stopped", jid)
    finally:
        connections.close_all()  # this thread's database connections end with it
