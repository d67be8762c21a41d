"""Who may call the JSON API and who may act.

* `bearer_key(request)` reads `Authorization: Bearer <key>`.
* `authenticate(request)` turns that key into a usable `ApiToken`: known,
  not revoked, not expired, of an active user (only the key's hash is
  stored, so the lookup is by hash). Otherwise None.
* A token carries scopes; `token.allows(scope)` is true when the token
  carries the scope AND its user still holds the matching permission. The
  scope rules (`SCOPES`, `can_act`, `user_scopes`, `grant_error`) live in
  core/scopes.py, which the ApiToken model imports too; they are re-exported
  here for the code that asks who may act.
* `token_required` guards a view: 401 without a usable token, 403 when the
  token does not allow the scope.
* `metrics_allowed(request)`: /metrics takes QUEUEADMIN_METRICS_TOKEN from
  the environment, or an API token allowing `metrics`.
"""
from __future__ import annotations

import functools
import hmac
from datetime import timedelta

from django.http import JsonResponse
from django.utils import timezone

from queueadmin.core import conf
from queueadmin.core.models import ApiToken
from queueadmin.core.scopes import (ACT_PERMISSION, DEFAULT_SCOPES, SCOPES, allows, can_act, can_view,  # noqa: F401
                                    grant_error, parse_scopes, user_scopes)

LAST_USED_RESOLUTION = timedelta(minutes=1)  # write last_used_at at most this often


def bearer_key(request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key or len(key) > 200:
        return None
    return key


def authenticate(request):
    """The request's usable ApiToken (with its user), or None: no or unknown
    key, revoked or expired token, inactive user."""
    key = bearer_key(request)
    if key is None:
        return None
    try:
        token = ApiToken.objects.select_related("user").get(key_hash=ApiToken.hash(key))
    except ApiToken.DoesNotExist:
        return None
    now = timezone.now()
    if not token.user.is_active or not token.usable(now):
        return None
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def metrics_allowed(request) -> bool:
    """/metrics: the shared QUEUEADMIN_METRICS_TOKEN, or a token allowing `metrics`."""
    shared = conf.get("METRICS_TOKEN") or ""
    key = bearer_key(request)
    if key is None:
        return False
    if shared and hmac.compare_digest(key.encode(), str(shared).encode()):
        return True
    token = authenticate(request)
    return token is not None and token.allows("metrics")


def unauthorized(message: str = "missing or invalid API token (send 'Authorization: Bearer <key>')"):
    response = JsonResponse({"error": message}, status=401)
    response["WWW-Authenticate"] = 'Bearer realm="queueadmin"'
    return response


def forbidden(message: str = "this token's user may view but not act (needs queueadmin.change_requestrecord)"):
    return JsonResponse({"error": message}, status=403)


def scope_forbidden(token, scope: str):
    """The 403 for a token that does not allow `scope`: says whether the token or its user lacks it."""
    if scope in token.scope_set:
        if scope in ("submit", "steer"):
            return forbidden()
        return forbidden(f"this token's user lacks the permission for scope {scope!r}")
    return forbidden(f"this token lacks the scope {scope!r} (it has: {', '.join(token.scopes_list) or 'none'})")


def token_required(view=None, *, act: bool = False, scope: str | None = None):
    """Authenticate by bearer token and require `scope` (default: "read", or
    with act=True either "submit" or "steer", until every view names its scope).
    Sets `request.api_token` and `request.user` to the token's user."""

    def decorate(view):
        needed = (scope,) if scope else (("submit", "steer") if act else ("read",))
        for name in needed:
            if name not in SCOPES:
                raise ValueError(f"unknown scope {name!r}")

        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            token = authenticate(request)
            if token is None:
                return unauthorized()
            request.api_token, request.user = token, token.user
            if not any(token.allows(name) for name in needed):
                return scope_forbidden(token, needed[0])
            return view(request, *args, **kwargs)

        return wrapper

    return decorate(view) if view is not None else decorate
