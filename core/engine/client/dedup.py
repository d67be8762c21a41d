"""Scoped de-duplication (DESIGN.md semantics 6 and 14): a duplicate of a
pending or running request returns it, but only within one scope, so one
user's key can never capture, suppress or reveal another's submission.

The key stored (in the request's meta and its queue's `dedup` hash, which
the Lua scripts use as they always did) is "<scope>\\x1f<key>". Scopes:

* "user:<id>": the dashboard and API tokens, by owner (services.dedup_scope);
* INTERNAL: everything else (the Python API, commands, Django Tasks);
* PERIODIC: periodic fires only (periodic.py); no submission may take it,
  so none can squat a fire's key.

Keys stored before scopes existed have no mark: they match no scoped key,
and read back as they were (scope "").
"""
from __future__ import annotations

import hashlib

from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.client.limits import check_text

SCOPE_MARK = "\x1f"
INTERNAL = "internal"
PERIODIC = "periodic"


def scoped_key(scope: str, key: str) -> str:
    return f"{scope}{SCOPE_MARK}{key}" if key else ""


def split_key(stored: str) -> tuple[str, str]:
    """(scope, key) of a stored de-dup key."""
    scope, mark, key = stored.partition(SCOPE_MARK)
    return (scope, key) if mark else ("", stored)


def check_scope(scope: str) -> str:
    """A scope a submission may use (QueueError for PERIODIC or a malformed one)."""
    if not isinstance(scope, str) or not scope or SCOPE_MARK in scope or len(scope) > 100:
        raise QueueError("the de-dup scope must be a short text without \\x1f")
    if scope == PERIODIC:
        raise QueueError(f"the de-dup scope {PERIODIC!r} is kept for periodic requests")
    return check_text(scope, "the de-dup scope")


def default_dedup_key(processor: str, payloads: list[str], keyed: bool = False) -> str:
    """A hash of the processor and the payloads; `keyed` (an encrypted
    queue's): an HMAC under a key derived from the newest encryption key, so
    the stored key does not let anyone test guesses of the clear text."""
    if keyed:
        from queueadmin.core.engine.features import encryption

        return encryption.default_dedup_key(processor, payloads)
    h = hashlib.sha256(processor.encode())
    for p in payloads:
        h.update(b"\n")
        h.update(p.encode())
    return h.hexdigest()
