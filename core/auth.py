"""Who may call the JSON API and who may act.

* `bearer_key(request)` reads `Authorization: Bearer <key>`.
* `authenticate(request)` turns that key into a usable `ApiToken`: known,
  not revoked, not expired, of an active user (only the key's hash is
  stored, so the lookup is by hash). Otherwise None.
* A token carries scopes (`SCOPES`); `token.allows(scope)` is true when the
  token carries the scope AND its user still holds the matching permission
  (`user_scopes`), so taking a permission away narrows every token at once.
* `grant_error(issuer, owner, scopes)`: the one rule for issuing tokens
  (admin and `manage.py queue_token`): only a superuser issues for someone
  else, and never beyond the owner's own permissions.
* `token_required` guards a view: 401 without a usable token, 403 when the
  token does not allow the scope.
* `can_act(user)`: superusers, and users with `queueadmin.change_requestrecord`,
  may change things (submit, cancel, reprioritise, requeue...); other staff
  only view. The dashboard and the API share this one rule.
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

ACT_PERMISSION = "queueadmin.change_requestrecord"
LAST_USED_RESOLUTION = timedelta(minutes=1)  # write last_used_at at most this often

# read: requests, results, queues (staff); submit: new requests (can_act);
# steer: cancel, priority, concurrency, requeue, retry (can_act);
# metrics: /metrics (granted to staff, or by a superuser to a scraper account).
SCOPES = ("read", "submit", "steer", "metrics")
DEFAULT_SCOPES = ("read", "submit", "steer")  # what tokens made before scopes existed carry


def can_act(user) -> bool:
    """May this user change queue state, or only look at it?"""
    if user is None or not getattr(user, "is_active", False):
        return False
    return bool(user.is_superuser or user.has_perm(ACT_PERMISSION))


def can_view(user) -> bool:
    """May this user read queue state (the dashboard's rule: active staff)?"""
    if user is None or not getattr(user, "is_active", False):
        return False
    return bool(user.is_staff or user.is_superuser)


def user_scopes(user) -> frozenset[str]:
    """The scopes this user's own permissions back."""
    scopes = set()
    if can_view(user):
        scopes |= {"read", "metrics"}
    if can_act(user):
        scopes |= {"submit", "steer"}
    return frozenset(scopes)


def parse_scopes(text) -> tuple[str, ...]:
    """'read,submit' / 'read submit' / an iterable -> scopes in SCOPES order; ValueError if unknown."""
    names = text.replace(",", " ").split() if isinstance(text, str) else list(text)
    unknown = sorted(set(names) - set(SCOPES))
    if unknown:
        raise ValueError(f"unknown scope {', '.join(map(repr, unknown))} (choose from {', '.join(SCOPES)})")
    return tuple(s for s in SCOPES if s in names)


def grant_error(issuer, owner, scopes) -> str | None:
    """Why `issuer` may not give `owner` a token with `scopes`, or None if it may.

    issuer None is the operator at the command line (as trusted as a superuser).
    """
    scopes = set(scopes)
    if not scopes:
        return "choose at least one scope"
    trusted = issuer is None or (issuer.is_active and issuer.is_superuser)
    if not trusted and issuer.pk != owner.pk:
        return "only a superuser may issue a token for another user"
    if not owner.is_active:
        return f"user {owner.get_username()!r} is inactive: its tokens would be refused"
    allowed = set(user_scopes(owner))
    if trusted:
        allowed.add("metrics")  # a scraper account needs no staff rights
    beyond = [s for s in SCOPES if s in scopes - allowed]
    if beyond:
        return (f"user {owner.get_username()!r} lacks the permission for scope {', '.join(beyond)} "
                "(read needs staff status; submit and steer need queueadmin.change_requestrecord or superuser)")
    return None


def allows(token, scope: str) -> bool:
    """The token carries `scope` and its user still holds the permission behind it."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}")
    if scope not in token.scope_set:
        return False
    if scope == "metrics":
        return bool(token.user.is_active)
    return scope in user_scopes(token.user)


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
    from .models import ApiToken

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
