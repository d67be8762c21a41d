"""The JSON API for producers in other languages (/metrics is in core.metrics).

Every view is token-authenticated (`Authorization: Bearer <key>`, see
core.auth), hence exempt from CSRF: no cookie is ever trusted here. Errors
are JSON `{"error": "..."}` with a 4xx status that says what is wrong; when
Redis cannot be reached the answer is 503, never a 500.

Roles: reading (status, results, queues) needs any active user's token;
acting (submit, cancel, priority, concurrency) also needs `can_act`.
"""
from __future__ import annotations

import functools
import json
import logging
import re
from dataclasses import asdict

import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import JsonResponse, StreamingHttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from . import auth, services
from .engine.client import TERMINAL, QueueError, encode
from .engine.config import MAX_CONCURRENCY
from .models import Queue, RequestRecord

log = logging.getLogger("queueadmin.api")

MAX_ITEMS = 1_000_000  # per request; settings.QUEUEADMIN["API_MAX_ITEMS"] overrides
MAX_BODY_BYTES = 64 * 1024 * 1024  # of a submission; settings.QUEUEADMIN["API_MAX_BODY_BYTES"] overrides
SMALL_BODY_BYTES = 16 * 1024  # of any other action's body
REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
SUBMIT_FIELDS = ("queue", "processor", "items", "priority", "concurrency", "delay_seconds",
                 "expires_in_seconds", "dedup_key", "dedup")
MAX_SECONDS = 10 * 365 * 86400
RESULTS_CHUNK_BYTES = 64 * 1024


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _limit(name: str, default: int) -> int:
    return int(settings.QUEUEADMIN.get(name, default))


# -- the decorator every API view wears ---------------------------------------


def api_view(methods: tuple[str, ...], act: bool = False):
    """Method check (405), token check (401/403), error mapping (4xx/503)."""

    def decorate(view):
        @functools.wraps(view)
        def guarded(request, *args, **kwargs):
            try:
                return view(request, *args, **kwargs)
            except ApiError as exc:
                return error(exc.status, exc.message)
            except QueueError as exc:
                return error(400, str(exc))
            except redis.RedisError as exc:
                return backend_down(exc)

        checked = auth.token_required(guarded, act=act)

        @csrf_exempt
        @never_cache
        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            if request.method not in methods:
                response = error(405, f"method {request.method} not allowed here; use {' or '.join(methods)}")
                response["Allow"] = ", ".join(methods)
                return response
            return checked(request, *args, **kwargs)

        return wrapper

    return decorate


def backend_down(exc: Exception) -> JsonResponse:
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)):
        log.warning("queue backend unavailable: %s", exc)
        return error(503, "queue backend unavailable")
    log.exception("queue backend error")
    return error(503, "queue backend error")


# -- reading and checking input -----------------------------------------------


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def read_json(request, limit: int) -> dict:
    """The body as a JSON object, or ApiError(400/413) saying what is wrong."""
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared:
        try:
            if int(declared) > limit:
                raise ApiError(413, f"body too large: at most {limit} bytes")
        except ValueError:
            raise ApiError(400, "bad Content-Length header") from None
    raw = request.body if hasattr(request, "_body") else request.read(limit + 1)
    if len(raw) > limit:
        raise ApiError(413, f"body too large: at most {limit} bytes")
    if not raw.strip():
        raise ApiError(400, "empty body: send a JSON object")
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise ApiError(400, "malformed JSON: the body is not UTF-8 text") from None
    except RecursionError:
        raise ApiError(400, "malformed JSON: nested too deeply") from None
    except ValueError as exc:
        raise ApiError(400, f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the body must be a JSON object, not {_kind(data)}")
    return data


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _only(data: dict, allowed: tuple[str, ...]) -> None:
    unknown = sorted(k for k in data if k not in allowed)
    if unknown:
        names = ", ".join(repr(k[:40]) for k in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise ApiError(400, f"unknown field(s): {names}; expected: {', '.join(allowed)}")


def _string(data: dict, field: str, max_length: int, required: bool = False) -> str | None:
    value = data.get(field)
    if value is None:
        if required:
            raise ApiError(400, f"{field} is required")
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"{field} must be a string, not {_kind(value)}")
    if not value:
        raise ApiError(400, f"{field} must not be empty")
    if len(value) > max_length:
        raise ApiError(400, f"{field} is too long: at most {max_length} characters")
    return value


def _integer(data: dict, field: str, low: int, high: int, required: bool = False) -> int | None:
    value = data.get(field)
    if value is None and not required:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ApiError(400, f"{field} must be an integer between {low} and {high}")
    return value


def _seconds(data: dict, field: str, positive: bool = False) -> float | None:
    value = data.get(field)
    if value is None:
        return None
    low = "more than 0" if positive else "0 or more"
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0 or (positive and value == 0) \
            or value > MAX_SECONDS:
        raise ApiError(400, f"{field} must be a number of seconds, {low} and at most 10 years")
    return float(value)


def submission(data: dict) -> tuple[str, str, list, dict]:
    """Check a POST /api/requests body: (queue, processor, items, options)."""
    _only(data, SUBMIT_FIELDS)
    queue = _string(data, "queue", 64, required=True)
    processor = _string(data, "processor", 100, required=True)
    items = data.get("items")
    if items is None:
        raise ApiError(400, "items is required: a list of JSON values, one per item")
    if not isinstance(items, list):
        raise ApiError(400, f"items must be a list of JSON values, not {_kind(items)}")
    if not items:
        raise ApiError(400, "items is empty: a request needs at least one item")
    max_items = _limit("API_MAX_ITEMS", MAX_ITEMS)
    if len(items) > max_items:
        raise ApiError(400, f"too many items: {len(items)} (at most {max_items} per request)")
    delay = _seconds(data, "delay_seconds") or 0.0
    expires_in = _seconds(data, "expires_in_seconds", positive=True)
    if expires_in is not None and expires_in <= delay:
        raise ApiError(400, "expires_in_seconds must be greater than delay_seconds (both count from now)")
    dedup = data.get("dedup", True)
    if not isinstance(dedup, bool):
        raise ApiError(400, "dedup must be true or false")
    options = {
        "priority": _integer(data, "priority", 0, 99),
        "concurrency": _integer(data, "concurrency", 1, MAX_CONCURRENCY),
        "delay": delay, "expires_in": expires_in,
        "dedup_key": _string(data, "dedup_key", 200), "dedup": dedup,
    }
    return queue, processor, items, options


# -- request lookups ----------------------------------------------------------


def _rid(rid: str) -> str:
    if not REQUEST_ID.match(rid):
        raise ApiError(404, "unknown request")
    return rid


def _archived(rid: str) -> RequestRecord | None:
    return RequestRecord.objects.filter(pk=rid).first()


def record_status(rec: RequestRecord) -> dict:
    """A status dict, shaped like the engine's, from the database history."""

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


def live_status(rid: str) -> dict:
    """The engine's status of a request still in Redis, or ApiError 404/409."""
    status = services.engine().status(rid)
    if status is not None:
        return {"id": rid, **status, "archived": False}
    rec = _archived(rid)
    if rec is None:
        raise ApiError(404, f"unknown request {rid!r}")
    raise ApiError(409, f"request {rid} is {rec.state} and no longer in the queue: nothing to change")


def _steerable(rid: str) -> dict:
    status = live_status(rid)
    if status["state"] in TERMINAL:
        raise ApiError(409, f"request {rid} is {status['state']}: nothing to change")
    return status


def _after_change(rid: str) -> JsonResponse:
    status = services.engine().status(rid)
    if status is None:
        return JsonResponse({"id": rid, "archived": True})
    services.record(status)
    return JsonResponse({"id": rid, **status, "archived": False})


def push_configured_queues(names) -> None:
    """Queues configured in the database but unknown to Redis (a fresh install
    before any worker ran sync_queues) are pushed now, so they can be used."""
    client = services.engine()
    names = list(names)
    pipe = client.redis.pipeline(transaction=False)
    for name in names:
        pipe.exists(client.keys.queue(name).config)
    missing = [n for n, known in zip(names, pipe.execute()) if not known]
    for row in Queue.objects.filter(name__in=missing):
        client.define_queue(row.name, row.to_config())


# -- views --------------------------------------------------------------------


@api_view(("POST",), act=True)
def submit(request):
    data = read_json(request, _limit("API_MAX_BODY_BYTES", MAX_BODY_BYTES))
    queue, processor, items, options = submission(data)
    push_configured_queues([queue])
    sub = services.submit(queue, processor, items, user=request.user, **options)
    status = services.engine().status(sub.id) or {}
    body = {**status, "id": sub.id, "duplicate": sub.duplicate, "scheduled": sub.scheduled}
    response = JsonResponse(body, status=200 if sub.duplicate else 201)
    response["Location"] = f"/api/requests/{sub.id}"
    return response


@api_view(("GET",))
def request_status(request, rid):
    rid = _rid(rid)
    status = services.engine().status(rid)
    if status is not None:
        return JsonResponse({"id": rid, **status, "archived": False})
    rec = _archived(rid)
    if rec is None:
        raise ApiError(404, f"unknown request {rid!r}")
    return JsonResponse(record_status(rec))


@api_view(("GET",))
def request_results(request, rid):
    rid = _rid(rid)
    client = services.engine()
    if client.status(rid) is None:
        if _archived(rid) is None:
            raise ApiError(404, f"unknown request {rid!r}")
        raise ApiError(410, f"the results of request {rid} are no longer kept (its retention ran out)")
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
            line = (encode(record) + "\n").encode()
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


@api_view(("POST",), act=True)
def cancel(request, rid):
    rid = _rid(rid)
    _steerable(rid)
    try:
        services.engine().cancel(rid)
    except QueueError as exc:
        raise ApiError(409, str(exc)) from None
    return _after_change(rid)


@api_view(("POST",), act=True)
def priority(request, rid):
    rid = _rid(rid)
    data = read_json(request, SMALL_BODY_BYTES)
    _only(data, ("priority",))
    value = _integer(data, "priority", 0, 99, required=True)
    _steerable(rid)
    try:
        services.engine().set_priority(rid, value)
    except QueueError as exc:
        raise ApiError(409, str(exc)) from None
    return _after_change(rid)


@api_view(("POST",), act=True)
def concurrency(request, rid):
    rid = _rid(rid)
    data = read_json(request, SMALL_BODY_BYTES)
    _only(data, ("concurrency",))
    value = _integer(data, "concurrency", 1, MAX_CONCURRENCY, required=True)
    _steerable(rid)
    try:
        services.engine().set_concurrency(rid, value)
    except QueueError as exc:
        raise ApiError(409, str(exc)) from None
    return _after_change(rid)


@api_view(("GET",))
def queues(request):
    client = services.engine()
    push_configured_queues(Queue.objects.values_list("name", flat=True))
    out = []
    for name in client.queues():
        try:
            stats, config = client.queue_stats(name), client.queue_config(name)
        except QueueError:
            continue  # listed but its config is gone: not a usable queue
        out.append({**stats, "name": name, "config": asdict(config)})
    return JsonResponse({"queues": out})


@csrf_exempt
def not_found(request, *args, **kwargs):
    return error(404, f"no API endpoint at {request.path[:200]}")
