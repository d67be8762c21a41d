"""Search and bulk actions by filter, as API operations (issue 22, item 4):
the dead letters searched by error text, processor, queue and time (the
dashboard's filter, core/deadfilter.py, so both accept and refuse the same
values); retry or discard every dead letter a filter matches, cancel every
live request a requests filter matches, requeue every stuck item, clear a
queue: each a bulk job (batches of 500, progress in Redis) whose id the
answer gives and whose progress GET /bulk/{id} reads.

Reads take the read scope, actions the steer scope; actions go through
core/operations.py with the token as the actor (one audit entry per job,
one per request it touched).
"""
from __future__ import annotations

import re
from typing import Optional
from urllib.parse import urlencode

from django.http import QueryDict
from ninja import Query, Router, Status
from pydantic import BaseModel, ConfigDict, Field

from queueadmin.core import bulk_operations, deadfilter, queries
from queueadmin.core.audit import Actor
from queueadmin.core.engine.client.queue_client import QueueError
from queueadmin.core.forms import RequestFilterForm
from queueadmin.core.models import RequestRecord
from .errors import ApiError
from .requests import ERRORS
from .security import BearerToken

JOB_ID = re.compile(r"^[0-9a-f]{11,20}$")
NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class DeadFilterIn(BaseModel):
    """The dead letters' filter; every field optional (none: every dead letter)."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    error: Optional[str] = Field(None, max_length=200, description="text the error contains (any case)")
    processor: Optional[str] = Field(None, max_length=200)
    queue: Optional[str] = Field(None, max_length=64)
    from_: Optional[str] = Field(None, alias="from", max_length=40,
                                 description="failed at or after: 2026-11-24, 2026-11-24T09:30 or Unix seconds")
    to: Optional[str] = Field(None, max_length=40, description="failed at or before (a date alone: its end)")
    request: Optional[str] = Field(None, max_length=32, description="one request's dead letters only")

    def params(self) -> dict[str, str]:
        return {"error": self.error, "processor": self.processor, "queue": self.queue, "from": self.from_,
                "to": self.to, "request": self.request}


class DeadBulkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    filter: DeadFilterIn = Field(default_factory=DeadFilterIn)


class RequestsBulkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    filter: dict[str, str] = Field(default_factory=dict, max_length=12,
                                   description="the requests list's filter: q, queue, state, processor, "
                                               "priority_min, priority_max, since, created_from, created_to")


class InflightBulkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queue: Optional[str] = Field(None, max_length=64, description="one queue's stuck items only")


class DeadLetterOut(BaseModel):
    request: str
    entry: str = Field(description="the item's entry id, what retry and discard take")
    index: Optional[int] = None
    queue: str
    processor: str
    error: str
    traceback: str
    attempts: Optional[int] = None
    dead_at: Optional[float] = Field(None, description="when it failed its last attempt (Unix seconds)")


class DeadPageOut(BaseModel):
    items: list[DeadLetterOut]
    count: int = Field(description="how many match: exact when count_exact, else at least this many "
                                   "(a search looks at 5,000 dead letters a call)")
    count_exact: bool
    next_cursor: Optional[str] = Field(None, description="pass as cursor for the next page; null: no more")
    filter: dict[str, str] = Field(description="the filter as understood, as query parameters")


class JobOut(BaseModel):
    id: str
    kind: str = Field(description="dead, requests, inflight or clear")
    action: str
    state: str = Field(description="running, done, stopped or failed")
    expected: int = Field(description="how many it was expected to touch (at least, when not exact)")
    exact: bool
    done: int
    skipped: int = Field(description="targets that had changed meanwhile (finished, already retried)")
    looked: int = Field(description="targets looked at so far")
    label: str
    error: str
    created: int = Field(description="ms since the epoch")
    finished: int = Field(description="ms since the epoch; 0 while running")


def _actor(request) -> Actor:
    return Actor.api(request.api_token)


def _parsed(params: dict) -> deadfilter.Parsed:
    parsed = deadfilter.parse({k: v for k, v in params.items() if v is not None}, queries.queue_names())
    if parsed.errors:
        raise ApiError(400, "invalid", " ".join(parsed.errors))
    return parsed


def _job(jid: str) -> dict:
    job = bulk_operations.bulk_progress(jid) if JOB_ID.match(jid) else None
    if job is None:
        raise ApiError(404, "not_found", "no such bulk job (finished jobs are kept for a day)")
    return {name: job[name] for name in JobOut.model_fields}


# -- operations ---------------------------------------------------------------------------


def dead_letters(request, error: Optional[str] = None, processor: Optional[str] = None, queue: Optional[str] = None,
                 from_: Optional[str] = Query(None, alias="from"), to: Optional[str] = None,
                 request_id: Optional[str] = Query(None, alias="request"), cursor: Optional[str] = None,
                 limit: int = Query(50, ge=1, le=200)):
    parsed = _parsed({"error": error, "processor": processor, "queue": queue, "from": from_, "to": to,
                      "request": request_id})
    try:
        found = queries.dead_search(parsed.flt, parsed.request, cursor, limit)
    except QueueError as exc:
        raise ApiError(400, "invalid", str(exc)) from None
    exact = found["exact"] and (not cursor or not parsed.searching)  # past page one a search counts from its cursor
    return {"items": found["rows"], "count": found["count"], "count_exact": exact,
            "next_cursor": found["next"], "filter": parsed.query()}


def dead_bulk(request, action: str, payload: DeadBulkIn = None):
    if action not in ("retry", "discard"):
        raise ApiError(404, "not_found", "dead letters can be retried or discarded")
    parsed = _parsed((payload or DeadBulkIn()).filter.params())
    return Status(202, _job(bulk_operations.bulk_dead(action, parsed.flt, parsed.request, actor=_actor(request))))


def requests_cancel(request, payload: RequestsBulkIn = None):
    form = RequestFilterForm(QueryDict(urlencode((payload or RequestsBulkIn()).filter)), queues=queries.queue_names())
    if not form.is_valid():
        raise ApiError(400, "invalid", "; ".join(f"{f}: {' '.join(e)}" for f, e in form.errors.items()))
    qs = form.filter(RequestRecord.objects.filter(state__in=queries.LIVE_STATES))
    ids = qs.order_by("id").values_list("id", flat=True).iterator(chunk_size=2000)  # never all in memory
    return Status(202, _job(bulk_operations.bulk_cancel(ids, expected=qs.count(), label="cancel requests", actor=_actor(request))))


def inflight_requeue(request, payload: InflightBulkIn = None):
    queue = (payload or InflightBulkIn()).queue
    if queue and queue not in queries.queue_names():
        raise ApiError(404, "not_found", f"no queue named {queue!r}")
    pairs = queries.inflight_pairs(queue)
    return Status(202, _job(bulk_operations.bulk_requeue(pairs, label="requeue stuck items", actor=_actor(request))))


def queue_clear(request, name: str):
    if not NAME.match(name) or name not in queries.queue_names():
        raise ApiError(404, "not_found", "no such queue")
    return Status(202, _job(bulk_operations.clear_queue(name, actor=_actor(request))))


def job(request, jid: str):
    return _job(jid)


# -- routes -------------------------------------------------------------------------------

AUDITED = " Recorded in the audit log with this token as the actor."
JOB = (" Answers 202 with the bulk job: it runs in batches of 500 (one batch's worth before the answer); "
       "GET /bulk/{id} gives its progress.")


def mount(router: Router) -> None:
    """Add these operations to the /api/v1 router."""
    read, steer = BearerToken("read"), BearerToken("steer", body="small")
    router.get("/dead-letters", auth=read, url_name="api-v1-dead-letters", response={200: DeadPageOut, **ERRORS},
               tags=["dead letters"], summary="Search dead letters",
               description="Scope: read. Newest request first, then item order. Filters: error (text the error "
                           "contains, any case), processor, queue, from and to (when it failed), request. A "
                           "filter on error text or time looks at 5,000 dead letters a call: count is then at "
                           "least that many until count_exact; page on with next_cursor.")(dead_letters)
    router.post("/bulk/dead-letters/{action}", auth=steer, url_name="api-v1-bulk-dead",
                response={202: JobOut, **ERRORS}, tags=["dead letters"],
                summary="Retry or discard every dead letter a filter matches",
                description="Scope: steer. action: retry or discard. The filter is the search's (none: every "
                            "dead letter)." + JOB + AUDITED)(dead_bulk)
    router.post("/bulk/requests/cancel", auth=steer, url_name="api-v1-bulk-cancel", response={202: JobOut, **ERRORS},
                tags=["requests"], summary="Cancel every live request a filter matches",
                description="Scope: steer. The filter is the requests list's." + JOB + AUDITED)(requests_cancel)
    router.post("/bulk/in-flight/requeue", auth=steer, url_name="api-v1-bulk-requeue",
                response={202: JobOut, **ERRORS}, tags=["requests"], summary="Requeue every stuck item",
                description="Scope: steer. Items whose lease ran out or whose worker died, of one queue or all; "
                            "a dead worker's tokens are given back first." + JOB + AUDITED)(inflight_requeue)
    router.post("/queues/{name}/clear", auth=steer, url_name="api-v1-queue-clear", response={202: JobOut, **ERRORS},
                tags=["queues"], summary="Clear a queue",
                description="Scope: steer. Cancels every live request of the queue: none of its waiting items "
                            "runs, running ones are stopped within about a second." + JOB + AUDITED)(queue_clear)
    router.get("/bulk/{jid}", auth=read, url_name="api-v1-bulk-job", response={200: JobOut, **ERRORS},
               tags=["bulk jobs"], summary="A bulk job's progress",
               description="Scope: read. A job whose runner is gone (its web process ended) runs on from where "
                           "it stopped.")(job)
