"""Operations on requests: submit, list, status, results, and steering
(cancel, priority, concurrency). `mount(router)` adds them to a router; the
app mounts them twice, under /api/v1/ and, for today's clients, /api/.
"""
from __future__ import annotations

import logging
import re
from datetime import datetime, timezone
from typing import Optional

import redis
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.db.models import Q
from django.http import HttpResponse, StreamingHttpResponse
from ninja import Query, Router, Status

from queueadmin.core import clients, operations
from queueadmin.core.audit import Actor
from queueadmin.core.webhooks import policy as webhooks
from queueadmin.core.engine.client.queue_client import TERMINAL, QueueError
from queueadmin.core.engine.client.limits import encode_value, utf8_size
from queueadmin.core.engine.client.reads import result_json
from ..models import RequestRecord
from . import cursor as cursors
from .caps import cap
from .errors import ApiError
from .schemas import (ConcurrencyIn, ErrorOut, PriorityIn, RequestOut, RequestPage, ResultLine, SubmitIn,
                      SubmittedOut)
from .security import BearerToken

log = logging.getLogger("queueadmin.api")

REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
RESULTS_CHUNK_BYTES = 64 * 1024
FLOAT_GROWTH = 5  # JSON text re-encoded is at most ~4.5x the sent text (1e15 -> 1000000000000000.0)

ERRORS = {code: ErrorOut for code in (400, 401, 403, 404, 409, 413, 429, 503)}


# -- lookups ------------------------------------------------------------------


def _rid(rid: str) -> str:
    if not REQUEST_ID.match(rid):
        raise ApiError(404, "not_found", "unknown request")
    return rid


def _unknown(rid: str) -> ApiError:
    return ApiError(404, "not_found", f"unknown request {rid!r}")


def live(rid: str, status: dict) -> dict:
    """The engine's status dict as a RequestOut body."""
    out = {**status, "id": rid, "archived": False}
    limit = status.get("time_limit")
    out["time_limit"] = float(limit) if limit not in (None, "") else None
    return out


def archived(rec: RequestRecord) -> dict:
    """A status, shaped like the engine's, from the database history."""

    def epoch(dt):
        return dt.timestamp() if dt else None

    return {
        "id": rec.id, "queue": rec.queue, "processor": rec.processor, "state": rec.state,
        "priority": rec.priority, "concurrency": rec.concurrency, "total": rec.total, "done": rec.done,
        "failed": rec.failed, "expired": rec.expired, "dedup_key": rec.dedup_key,
        "created_at": epoch(rec.created_at), "started_at": epoch(rec.started_at),
        "finished_at": epoch(rec.finished_at), "not_before": epoch(rec.not_before),
        "expires_at": epoch(rec.expires_at), "in_flight": 0, "dead": 0, "archived": True,
    }


def _steerable(rid: str) -> None:
    """The request is live and not finished, or ApiError 404/409."""
    status = clients.engine().status(rid)
    if status is None:
        rec = RequestRecord.objects.filter(pk=rid).first()
        if rec is None:
            raise _unknown(rid)
        raise ApiError(409, "conflict", f"request {rid} is {rec.state} and no longer in the queue: "
                                        "nothing to change")
    if status["state"] in TERMINAL:
        raise ApiError(409, "conflict", f"request {rid} is {status['state']}: nothing to change")


STEERED = ("id", "state", "priority", "concurrency", "archived")  # what a steer answer shows without read


def _after_change(request, rid: str, status: dict | None) -> dict:
    """The status after a change (as the operation recorded it): all of it
    with the read scope; else only what the change itself touched (the token
    may steer, not read)."""
    if status is None:
        return {"id": rid, "archived": True}
    out = live(rid, status)
    return out if request.api_token.allows("read") else {k: out.get(k) for k in STEERED}


def _check_item_sizes(request, items: list) -> None:
    most = cap("API_MAX_ITEM_BYTES")
    if len(request.body) * FLOAT_GROWTH <= most:
        return  # no item can be that large
    for n, item in enumerate(items):
        size = _json_size(item, most)
        if size is not None:
            raise ApiError(400, "item_too_large", f"item {n} is too large: {size} bytes as JSON text "
                                                  f"(at most {most})")


def _json_size(item, most: int) -> int | None:
    """The item's size as JSON text when it is over `most`, else None;
    encodes only what a cheap bound cannot clear (a string's character takes
    at most 6 bytes, a number at most 4300 digits)."""
    if isinstance(item, str) and len(item) * 6 + 2 <= most:
        return None
    if (item is None or isinstance(item, (bool, int, float))) and most >= 5000:
        return None
    size = utf8_size(encode_value(item, "an item"))  # QueueError (400) for what no entry point takes
    return size if size is not None and size > most else None


# -- operations -------------------------------------------------------------------


def submit(request, payload: SubmitIn, response: HttpResponse):
    _check_item_sizes(request, payload.items)
    operations.push_queues([payload.queue] + ([payload.then.queue] if payload.then and payload.then.queue else []))
    options = dict(priority=payload.priority, concurrency=payload.concurrency,
                   delay=payload.delay_seconds or 0.0, expires_in=payload.expires_in_seconds,
                   dedup_key=payload.dedup_key, dedup=payload.dedup)
    if payload.time_limit is not None:
        options["time_limit"] = payload.time_limit
    if payload.rate_limit:
        options["rate_limit"] = payload.rate_limit
    if payload.group:
        options["group"] = payload.group
    if payload.callback_url is not None:
        options.update(_callback(request, payload.callback_url))
    if payload.then is not None:
        options["then"] = payload.then.model_dump(exclude_none=True)
    sub = operations.submit(payload.queue, payload.processor, payload.items, user=request.user, **options)
    # a duplicate is another of this owner's requests: shown whole only to a token that may read
    shown = not sub.duplicate or request.api_token.allows("read")
    status = clients.engine().status(sub.id) if shown else None
    body = {**(live(sub.id, status) if status else {"id": sub.id}), "duplicate": sub.duplicate,
            "scheduled": sub.scheduled}
    base = "/api/v1" if request.path.startswith("/api/v1/") else "/api"
    response["Location"] = f"{base}/requests/{sub.id}"
    return Status(200 if sub.duplicate else 201, body)


def _callback(request, url: str) -> dict:
    """The webhook options of a submission, or 400 when the target is refused
    (core/webhooks/policy.py: allowed hosts, public addresses) or the token cannot sign."""
    try:
        webhooks.check_target(url)
        return {"callback_url": url, "callback_signer": webhooks.token_signer(request.api_token)}
    except webhooks.Refused as exc:
        raise ApiError(400, "invalid", f"callback_url refused: {exc}") from None


def request_list(request, queue: Optional[str] = None, state: Optional[str] = None,
                 limit: int = Query(100, ge=1, le=500), cursor: Optional[str] = None):
    """Newest first, from the history, with the live status of requests still in Redis."""
    rows = RequestRecord.objects.order_by("-created_at", "-id")
    if queue:
        rows = rows.filter(queue=queue)
    if state:
        rows = rows.filter(state=state)
    if cursor:
        created, rid = cursors.decode(cursor, _created_and_id)
        rows = rows.filter(Q(created_at__lt=created) | Q(created_at=created, id__lt=rid))
    page = list(rows[:limit + 1])
    more, page = len(page) > limit, page[:limit]
    statuses = clients.engine().statuses([r.id for r in page]) if page else []
    out = [live(r.id, st) if st else archived(r) for r, st in zip(page, statuses)]
    last = page[-1] if more else None
    after = cursors.encode([last.created_at.isoformat(), last.id]) if last else None
    return {"requests": out, "next_cursor": after}


def _created_and_id(value) -> tuple[datetime, str]:
    """A request list cursor's [created_at, id]: an id as request ids are
    (no lone surrogates for the database), a time the database can compare
    (in UTC, a year from 1 to 9999: OverflowError at the edges)."""
    stamp, rid = value
    if not isinstance(stamp, str) or not isinstance(rid, str) or not REQUEST_ID.fullmatch(rid):
        raise TypeError("[created_at, id]")
    created = datetime.fromisoformat(stamp)
    created = (created if created.tzinfo else created.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
    if not 1 < created.year < 9999:  # the database adapts it again (a time zone, microseconds): keep off the edges
        raise OverflowError("out of range")
    return created, rid


def request_status(request, rid: str):
    rid = _rid(rid)
    status = clients.engine().status(rid)
    if status is not None:
        return live(rid, status)
    rec = RequestRecord.objects.filter(pk=rid).first()
    if rec is None:
        raise _unknown(rid)
    return archived(rec)


def request_results(request, rid: str):
    rid = _rid(rid)
    client = clients.engine()
    if client.status(rid) is None:
        if not RequestRecord.objects.filter(pk=rid).exists():
            raise _unknown(rid)
        raise ApiError(410, "gone", f"the results of request {rid} are no longer kept (its retention ran out)")
    chunks = _result_lines(client, rid)
    if isinstance(request, ASGIRequest):  # Django would buffer a sync iterator whole under ASGI
        chunks = _async_chunks(chunks)
    response = StreamingHttpResponse(chunks, content_type="application/x-ndjson")
    response["Content-Disposition"] = f'inline; filename="{rid}.jsonl"'
    return response


def _result_lines(client, rid):
    """JSON Lines of client.results(), in chunks; a backend failure mid-way
    can no longer change the status code, so it ends the stream (logged)."""
    buffer, size = [], 0
    try:
        for record in client.results(rid):
            line = (result_json(record) + "\n").encode()  # standard JSON, whatever is stored
            buffer.append(line)
            size += len(line)
            if size >= RESULTS_CHUNK_BYTES:
                yield b"".join(buffer)
                buffer, size = [], 0
    except (QueueError, redis.RedisError) as exc:
        log.warning("results of %s cut short: %s", rid, exc)
    if buffer:
        yield b"".join(buffer)


async def _async_chunks(chunks):
    """Serve a sync generator chunk by chunk from worker threads."""
    while True:
        chunk = await sync_to_async(next, thread_sensitive=False)(chunks, None)
        if chunk is None:
            return
        yield chunk


def cancel(request, rid: str):
    rid = _rid(rid)
    _steerable(rid)
    return _after_change(request, rid, _steer(lambda: operations.cancel(rid, actor=Actor.api(request.api_token))))


def priority(request, rid: str, payload: PriorityIn):
    rid = _rid(rid)
    _steerable(rid)
    return _after_change(request, rid, _steer(lambda: operations.set_priority(
        rid, payload.priority, actor=Actor.api(request.api_token))))


def concurrency(request, rid: str, payload: ConcurrencyIn):
    rid = _rid(rid)
    _steerable(rid)
    return _after_change(request, rid, _steer(lambda: operations.set_concurrency(
        rid, payload.concurrency, actor=Actor.api(request.api_token))))


def _steer(operation) -> dict | None:
    """The operation's answer (the status after it), or 409."""
    try:
        return operation()
    except QueueError as exc:  # finished between the check and the change
        raise ApiError(409, "conflict", str(exc)) from None


# -- routes -------------------------------------------------------------------------

STEER_DOC = ("Scope: steer. The answer is the request's status with the read scope; without it, only "
             "id, state, priority, concurrency and archived.")
RESULTS_DOC = {"responses": {200: {"description": "one JSON object per line, one line per item, in index order",
                                   "content": {"application/x-ndjson": {
                                       "schema": ResultLine.model_json_schema()}}}}}


def mount(router: Router, *, legacy: bool = False) -> None:
    """Add the request operations to `router` (hidden from the schema when legacy)."""
    shown = {"include_in_schema": not legacy, "tags": ["requests"]}
    name = "api-legacy-" if legacy else "api-v1-"
    router.post("/requests", auth=BearerToken("submit", body="submission"), url_name=name + "submit",
                response={(200, 201): SubmittedOut, **ERRORS}, summary="Submit a request",
                description="Scope: submit. 201 for a new request, 200 for a duplicate of a pending or running "
                            "one of the same owner (see dedup_key; its status only with the read scope, else "
                            "its id); Location names the new request.", **shown)(submit)
    if not legacy:
        router.get("/requests", auth=BearerToken("read"), url_name=name + "list",
                   response={200: RequestPage, **ERRORS}, summary="List requests, newest first",
                   description="Scope: read. Paginated: pass next_cursor as ?cursor= for the next page.",
                   **shown)(request_list)
    router.get("/requests/{rid}", auth=BearerToken("read"), url_name=name + "request",
               response={200: RequestOut, **ERRORS}, summary="A request's status",
               description="Scope: read.", **shown)(request_status)
    router.get("/requests/{rid}/results", auth=BearerToken("read"), url_name=name + "results",
               response={200: None, 410: ErrorOut, **ERRORS}, summary="A request's results (JSON Lines, streamed)",
               description="Scope: read. 410 when the request's retention ran out.",
               openapi_extra=RESULTS_DOC, **shown)(request_results)
    steer = {"response": {200: RequestOut, 409: ErrorOut, **ERRORS}, **shown}
    router.post("/requests/{rid}/cancel", auth=BearerToken("steer"), url_name=name + "cancel",
                summary="Cancel a request", description=STEER_DOC, **steer)(cancel)
    router.post("/requests/{rid}/priority", auth=BearerToken("steer", body="small"), url_name=name + "priority",
                summary="Change a request's priority", description=STEER_DOC, **steer)(priority)
    router.post("/requests/{rid}/concurrency", auth=BearerToken("steer", body="small"),
                url_name=name + "concurrency", summary="Change a request's concurrency limit",
                description=STEER_DOC, **steer)(concurrency)

