"""An ASGI guard that refuses oversized request bodies before they are read.

Django's ASGI handler reads a whole body (into memory or a temporary file)
before any view or middleware sees the request, so a view cannot refuse an
upload it does not want: by then it has arrived. This guard sits in front:

Only paths under queueadmin's mount point are guarded (all of them in the
standalone service, where it is mounted at the root; a project's own views
keep its own limits).

* API paths (<mount>api/...): a body from a client without a usable API token may
  be at most API_ANON_MAX_BODY_BYTES (small); with one, API_MAX_BODY_BYTES.
  The token is only looked up when the body needs more than the anonymous
  allowance (a declared Content-Length above it, or a chunked body); an
  unusable token then gets its 401 at once, without the body being read.
* Every other path: at most API_MAX_BODY_BYTES (nothing bigger is ever useful).
* A declared Content-Length over the cap is refused at once with 413; a
  chunked body (no length) is counted as it arrives and refused with 413
  when it grows past the cap. Refusals close the connection, so the server
  stops receiving the rest.
* Large bodies (over `LARGE_BODY`) share a budget per process,
  API_BODY_BUDGET_BYTES, held from the first byte until the response is
  sent: handling a body costs the web process several times its size (the
  body, its parsed JSON, the items encoded for Redis: a 61 MiB submission
  took it from 74 to 443 MB, four at once to 1.2 GB; with the budget, four
  at once peak at 444 MB: one is handled, three are told to retry). A body that does not
  fit while others are handled gets 503 with Retry-After, before it is read
  (or, without a Content-Length, as soon as it outgrows what is left); one
  body alone always fits, up to its cap.
"""
from __future__ import annotations

import json
import threading
from types import SimpleNamespace

from asgiref.sync import sync_to_async
from django.urls import reverse

from queueadmin.core import auth
from queueadmin.core.api.caps import cap


BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")
LARGE_BODY = 1024 * 1024  # smaller bodies (steering, most submissions) are not counted against the budget
RETRY_AFTER = b"5"  # seconds: about what a large submission takes to be handled


class BodyTooLarge(Exception):
    pass


class Busy(Exception):
    """The body outgrew what is left of the budget."""


class Budget:
    """Bytes of large bodies this process holds at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.used = 0

    def take(self, amount: int) -> bool:
        """Count `amount` more bytes; False (nothing counted) when they do not
        fit beside what others hold."""
        with self.lock:
            if self.used and self.used + amount > cap("API_BODY_BUDGET_BYTES"):
                return False
            self.used += amount
            return True

    def give(self, amount: int) -> None:
        with self.lock:
            self.used -= amount


budget = Budget()


def mount_point() -> str:
    """Where queueadmin's URLs are mounted ("/" in the standalone service)."""
    return reverse("queueadmin:overview")


def is_api(path: str, mount: str = "/") -> bool:
    return path == mount + "api" or path.startswith(mount + "api/")


def _headers(scope) -> dict[bytes, list[bytes]]:
    found: dict[bytes, list[bytes]] = {}
    for name, value in scope.get("headers", []):
        found.setdefault(name.lower(), []).append(value)
    return found


def declared_length(headers) -> int | None:
    """The Content-Length, None without one; ValueError when it is not one number."""
    values = {v.strip() for v in headers.get(b"content-length", [])}
    if not values:
        return None
    if len(values) > 1 or not next(iter(values)).isdigit():
        raise ValueError("bad Content-Length")
    return int(next(iter(values)))


def _usable_token(authorization: str) -> bool:
    return auth.authenticate(SimpleNamespace(headers={"Authorization": authorization})) is not None


async def busy(send, api: bool) -> None:
    await refuse(send, 503, "busy", "the server is handling other large bodies: try again in a few seconds", api,
                 [(b"retry-after", RETRY_AFTER)])


async def refuse(send, status: int, code: str, message: str, api: bool, headers=()) -> None:
    if api:
        body, kind = json.dumps({"error": message, "code": code}).encode(), b"application/json"
    else:
        body, kind = (message + "\n").encode(), b"text/plain; charset=utf-8"
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", kind), (b"content-length", str(len(body)).encode()), (b"connection", b"close"),
        *headers]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    def __init__(self, app):
        self.app = app
        self.mount: str | None = None  # known once the URLconf is loaded (first request)

    async def __call__(self, scope, receive, send):
        if self.mount is None and scope["type"] == "http":
            self.mount = mount_point()
        path = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith(self.mount):
            return await self.app(scope, receive, send)
        api = is_api(path, self.mount)
        headers = _headers(scope)
        try:
            declared = declared_length(headers)
        except ValueError:
            return await refuse(send, 400, "invalid", "bad Content-Length header", api)
        # no length: a chunked body (HTTP/1.1), or any body under HTTP/2; counted as it comes
        unknown = declared is None and (b"transfer-encoding" in headers or scope.get("method") in BODY_METHODS)
        limit = cap("API_MAX_BODY_BYTES")
        if api:
            limit = await self._api_limit(headers, declared, unknown, limit)
            if limit is None:
                return await refuse(send, 401, "unauthorized",
                                    "missing or invalid API token (send 'Authorization: Bearer <key>')", api,
                                    [(b"www-authenticate", b'Bearer realm="queueadmin"')])
        if declared is not None and declared > limit:
            return await refuse(send, 413, "body_too_large", f"body too large: at most {limit} bytes here", api)
        held = declared if declared is not None and declared > LARGE_BODY else 0
        if held and not budget.take(held):
            return await busy(send, api)
        try:
            held = await self._counted(scope, receive, send, limit, api, held)
        finally:
            budget.give(held)

    async def _api_limit(self, headers, declared, unknown: bool, full: int) -> int | None:
        """The cap for this API call; None when its token is unusable and the
        body needs more than an anonymous caller may send."""
        anonymous = cap("API_ANON_MAX_BODY_BYTES")
        if not (unknown or (declared or 0) > anonymous):
            return anonymous  # no body, or a small one: the view checks the token
        authorization = headers.get(b"authorization")
        if not authorization:
            return anonymous
        if await sync_to_async(_usable_token)(authorization[0].decode("latin-1")):
            return full
        return None

    async def _counted(self, scope, receive, send, limit: int, api: bool, held: int) -> int:
        """Run the app, counting the body as it arrives; returns the bytes of
        the budget held at the end (`held` at first: a declared large body;
        a body without a length takes its share as it grows past LARGE_BODY)."""
        received, started = 0, False

        async def counted_receive():
            nonlocal received, held
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge
                if received > LARGE_BODY and received > held:
                    if not budget.take(received - held):
                        raise Busy
                    held = received
            return message

        async def tracked_send(message):
            nonlocal started, held
            started = started or message["type"] == "http.response.start"
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body") and held:
                budget.give(held)  # answered: the next may come in (before the handler's own clean-up)
                held = 0

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge:
            if not started:
                await refuse(send, 413, "body_too_large", f"body too large: at most {limit} bytes here", api)
        except Busy:
            if not started:
                await busy(send, api)
        return held
