"""What an API token may carry, and what a user's permissions back: the
rules that tokens (core/models.py ApiToken) and access checks (core/auth.py)
both follow. A base module, as Django's contrib/auth/base_user.py is: no
models here, so the model and the checks can both import it.

* `SCOPES`: read, submit, steer, metrics.
* `can_act(user)`: superusers, and users with `queueadmin.change_requestrecord`,
  may change things (submit, cancel, reprioritise, requeue...); other staff
  only view. The dashboard and the API share this one rule.
* `user_scopes(user)`: the scopes a user's own permissions back;
  `allows(token, scope)`: the token carries the scope AND its user still
  holds the permission behind it, so taking a permission away narrows every
  token at once.
* `grant_error(issuer, owner, scopes)`: the one rule for issuing tokens
  (admin and `manage.py queue_token`): only a superuser issues for someone
  else, and never beyond the owner's own permissions.
"""
from __future__ import annotations

ACT_PERMISSION = "queueadmin.change_requestrecord"

# read: requests, results, queues (staff); submit: new requests (can_act);
# steer: cancel, priority, concurrency, retry, discard, requeue, stop, run now, pause, resume (can_act);
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
