"""Who may call the JSON API and who may act.

* `bearer_key(request)` reads `Authorization: Bearer <key>`.
* `authenticate(request)` turns that key into an active user's `ApiToken`
  (only the key's hash is stored, so the lookup is by hash).
* `token_required` guards a view: no key, an unknown key, or a key of an
  inactive user gets 401 with a JSON error.
* `can_act(user)`: superusers, and users with `core.change_requestrecord`,
  may change things (submit, cancel, reprioritise, requeue...); other staff
  only view. The dashboard and the API share this one rule.
"""
from __future__ import annotations

import functools
from datetime import timedelta

from django.http import JsonResponse
from django.utils import timezone

ACT_PERMISSION = "core.change_requestrecord"
LAST_USED_RESOLUTION = timedelta(minutes=1)  # write last_used_at at most this often


def can_act(user) -> bool:
    """May this user change queue state, or only look at it?"""
    if user is None or not getattr(user, "is_active", False):
        return False
    return bool(user.is_superuser or user.has_perm(ACT_PERMISSION))


def bearer_key(request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key or len(key) > 200:
        return None
    return key


def authenticate(request):
    """The request's ApiToken (with its user), or None."""
    from .models import ApiToken

    key = bearer_key(request)
    if key is None:
        return None
    try:
        token = ApiToken.objects.select_related("user").get(key_hash=ApiToken.hash(key))
    except ApiToken.DoesNotExist:
        return None
    if not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def unauthorized(message: str = "missing or invalid API token (send 'Authorization: Bearer <key>')"):
    response = JsonResponse({"error": message}, status=401)
    response["WWW-Authenticate"] = 'Bearer realm="queueadmin"'
    return response


def forbidden(message: str = "this token's user may view but not act (needs core.change_requestrecord)"):
    return JsonResponse({"error": message}, status=403)


def token_required(view=None, *, act: bool = False):
    """Authenticate by bearer token; with act=True also require `can_act`.
    Sets `request.api_token` and `request.user` to the token's user."""

    def decorate(view):
        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            token = authenticate(request)
            if token is None:
                return unauthorized()
            request.api_token, request.user = token, token.user
            if act and not can_act(token.user):
                return forbidden()
            return view(request, *args, **kwargs)

        return wrapper

    return decorate(view) if view is not None else decorate
