"""What every operation checks before it reads its input, in this order:

1. a usable bearer token (core.auth.authenticate): else 401;
2. the token's rate limit (ratelimit): else 429 with Retry-After;
3. the operation's scope (core.auth, `token.allows`): else 403, code "scope";
4. the body's size (caps): else 413. Bodies over the anonymous cap never get
   this far under ASGI (core.bodylimit refuses them unread); this check keeps
   steering calls small and covers servers that do not run the guard.

Scopes: read (status, results, lists), submit (new requests), steer (cancel,
priority, concurrency, and the rest of what the dashboard steers: steering.py).
"""
from __future__ import annotations

from ninja.security import HttpBearer

from .. import auth
from . import ratelimit
from .caps import cap
from .errors import ApiError


class BearerToken(HttpBearer):
    """`Authorization: Bearer <key>` of an API token allowing `scope`."""

    def __init__(self, scope: str, body: str | None = None):
        if scope not in auth.SCOPES:
            raise ValueError(f"unknown scope {scope!r}")
        super().__init__()
        self.scope = scope
        self.body_cap = {"submission": "API_MAX_BODY_BYTES", "small": "API_SMALL_BODY_BYTES", None: None}[body]

    def __call__(self, request):
        token = auth.authenticate(request)
        if token is None:
            return None  # ninja answers AuthenticationError: 401 (errors.install)
        request.api_token, request.user = token, token.user
        ratelimit.check(token.pk)
        if not token.allows(self.scope):
            raise ApiError(403, "scope", refusal(token, self.scope))
        if self.body_cap:
            read_body(request, cap(self.body_cap))
        return token

    def authenticate(self, request, token):  # required by HttpBearer; __call__ does the work
        raise NotImplementedError


def refusal(token, scope: str) -> str:
    if scope in token.scope_set:  # the token has it, its user no longer holds the permission
        if scope in ("submit", "steer"):
            return (f"this token's user may view but not act (scope {scope!r} needs "
                    "queueadmin.change_requestrecord)")
        return f"this token's user lacks the permission for scope {scope!r}"
    return f"this token lacks the scope {scope!r} (it has: {', '.join(token.scopes_list) or 'none'})"


def read_body(request, limit: int) -> None:
    """Read at most limit + 1 bytes of the body; 413 beyond the limit.
    (Django's request.body would refuse anything over
    DATA_UPLOAD_MAX_MEMORY_SIZE, a form limit that does not fit JSON bodies.)"""
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared.strip().isdigit() and int(declared) > limit:
        raise too_large(limit)
    if not hasattr(request, "_body"):
        request._body = request.read(limit + 1)
    if len(request._body) > limit:
        raise too_large(limit)


def too_large(limit: int) -> ApiError:
    return ApiError(413, "body_too_large", f"body too large: at most {limit} bytes here")
