"""One error shape for the whole API: `{"error": "<for people>", "code":
"<for programs>"}` with a 4xx status for every bad input and 503 when Redis
cannot serve; never a 500 page or a traceback.

Codes: malformed_json, empty_body, not_an_object, bad_unicode, unknown_field,
missing_field, invalid, too_long, too_many_items, item_too_large (400);
unauthorized (401); scope (403); not_found (404); method_not_allowed (405);
conflict (409); gone (410); body_too_large (413); rate_limited (429);
backend_unavailable, backend_out_of_memory, backend_read_only, backend_busy,
backend_error, database_unavailable (503); internal (500, a bug: logged).
"""
from __future__ import annotations

import logging

import redis
from django.db import InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from ninja.errors import AuthenticationError, HttpError, ValidationError

from ..engine.config import MAX_CONCURRENCY
from ..engine.errors import QueueError, describe, trouble

log = logging.getLogger("queueadmin.api")

# Redis trouble (core.engine.errors.trouble) -> the 503's code
BACKEND_CODES = {"OOM": "backend_out_of_memory", "READONLY": "backend_read_only", "LOADING": "backend_busy",
                 "BUSY": "backend_busy", "CONNECTION": "backend_unavailable", "TIMEOUT": "backend_unavailable",
                 "MASTERDOWN": "backend_unavailable", "CLUSTERDOWN": "backend_unavailable",
                 "TRYAGAIN": "backend_busy"}


class ApiError(Exception):
    """Raised anywhere under a view: answered as {"error": message, "code": code}."""

    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def error_response(status: int, code: str, message: str, headers: dict | None = None) -> JsonResponse:
    response = JsonResponse({"error": message, "code": code}, status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def unauthorized() -> ApiError:
    return ApiError(401, "unauthorized", "missing or invalid API token (send 'Authorization: Bearer <key>')",
                    {"WWW-Authenticate": 'Bearer realm="queueadmin"'})


def backend_error(exc: redis.RedisError) -> JsonResponse:
    kind = trouble(exc)
    code = BACKEND_CODES.get(kind or "", "backend_error")
    if kind:
        log.warning("queue backend: %s", describe(exc))
    else:
        log.exception("queue backend error")
    message = "queue backend unavailable" if code == "backend_unavailable" else describe(exc)
    return error_response(503, code, message)


def kind_of(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


# -- pydantic's errors, said the way this API always said them ------------------

# What a field must be, for "X must be ..." and "X is required: ..."
RULES = {
    "queue": "a queue name", "processor": "a processor name",
    "items": "a list of JSON values, one per item",
    "priority": "an integer between 0 and 99",
    "concurrency": "an integer between 1 and {max_concurrency}",
    "delay_seconds": "a number of seconds, 0 or more and at most 10 years",
    "expires_in_seconds": "a number of seconds, more than 0 and at most 10 years",
    "time_limit": "a number of seconds, 0 (no limit) or more and at most 10 years",
    "dedup": "true or false", "dedup_key": "a string", "rate_limit": "text such as 20/s, 600/min or 10000/h",
    "group": "text of 1 to 64 characters, without '|' or control characters",
    "limit": "an integer between 1 and 500", "cursor": "a cursor from a previous page",
}
STRING_FIELDS = {"queue", "processor", "dedup_key", "cursor", "state", "rate_limit", "group"}


def _rule(field: str) -> str:
    return RULES.get(field, "valid").format(max_concurrency=MAX_CONCURRENCY)


def explain(errors: list[dict]) -> tuple[str, str]:
    """(code, message) for ninja's validation errors: the first few problems,
    each as one clause naming the field."""
    unknown = [e["loc"][-1] for e in errors if e["type"] == "extra_forbidden"]
    clauses, codes = [], []
    if unknown:
        names = ", ".join(repr(str(k)[:40]) for k in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        clauses.append(f"unknown field(s): {names}")
        codes.append("unknown_field")
    for e in errors:
        if e["type"] == "extra_forbidden":
            continue
        code, text = _one(e)
        if text not in clauses:
            clauses.append(text)
            codes.append(code)
    return (codes[0] if codes else "invalid"), "; ".join(clauses[:5]) or "invalid input"


def _one(e: dict) -> tuple[str, str]:
    kind, value = e["type"], e.get("input")
    loc = [str(p) for p in e["loc"]]
    # ("body", "<param>", field, ...) or ("query", field, ...) or ("path", field)
    path = loc[2:] if loc and loc[0] == "body" else loc[1:]
    field = path[0] if path else ""
    if kind.startswith("qa_"):  # our own validators already said it; the rest is the code
        return kind[3:], e["msg"]
    if not field and kind == "missing":
        return "empty_body", "empty body: send a JSON object"
    if not field:
        return "not_an_object", f"the body must be a JSON object, not {kind_of(value)}"
    if kind == "missing":
        return "missing_field", f"{field} is required: {_rule(field)}"
    if kind == "string_unicode":
        return "bad_unicode", f"{field} is not valid Unicode text (it holds a lone surrogate)"
    if field in STRING_FIELDS:
        if kind == "string_too_short":
            return "invalid", f"{field} must not be empty"
        if kind == "string_too_long":
            return "too_long", f"{field} is too long: at most {e.get('ctx', {}).get('max_length')} characters"
        return "invalid", f"{field} must be a string, not {kind_of(value)}"
    if field == "items":
        if kind == "too_short":
            return "invalid", "items is empty: a request needs at least one item"
        return "invalid", f"items must be a list of JSON values, not {kind_of(value)}"
    return "invalid", f"{field} must be {_rule(field)}"


# -- the handlers -----------------------------------------------------------------


def install(api) -> None:
    """Every exception a view can raise, answered in the one shape."""

    @api.exception_handler(ApiError)
    def on_api_error(request, exc: ApiError):
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @api.exception_handler(ValidationError)
    def on_validation(request, exc: ValidationError):
        code, message = explain(exc.errors)
        return error_response(400, code, message)

    @api.exception_handler(AuthenticationError)
    def on_unauthenticated(request, exc):
        return on_api_error(request, unauthorized())

    @api.exception_handler(HttpError)
    def on_http_error(request, exc: HttpError):
        cause = exc.__cause__  # the body parser's ApiError, wrapped by ninja
        if isinstance(cause, ApiError):
            return on_api_error(request, cause)
        return error_response(exc.status_code, "invalid" if exc.status_code == 400 else "error", str(exc))

    @api.exception_handler(QueueError)
    def on_queue_error(request, exc: QueueError):
        text = str(exc)
        return error_response(400, "bad_unicode" if "not valid Unicode" in text else "invalid", text)

    @api.exception_handler(redis.RedisError)
    def on_redis(request, exc):
        return backend_error(exc)

    def on_database(request, exc):
        log.warning("database unavailable: %s", exc)
        return error_response(503, "database_unavailable", "the database cannot be reached")

    api.add_exception_handler(OperationalError, on_database)  # down, or refusing connections
    api.add_exception_handler(InterfaceError, on_database)

    @api.exception_handler(Http404)
    def on_404(request, exc):
        return error_response(404, "not_found", f"no API endpoint at {request.path[:200]}")

    @api.exception_handler(Exception)
    def on_bug(request, exc):
        log.exception("API error on %s %s", request.method, request.path[:200])
        return error_response(500, "internal", "internal error (logged on the server)")
