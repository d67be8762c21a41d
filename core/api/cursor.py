"""Opaque page cursors: a JSON value (the last row's sort key) in URL-safe
base64. A cursor that does not decode is a 400, never a wrong page."""
from __future__ import annotations

import base64
import binascii
import json

from .errors import ApiError

MAX_CHARS = 1000  # a cursor this API makes is under 100 characters


def encode(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def decode(cursor: str, check=lambda value: value):
    """The value, passed through `check` (which raises on a wrong shape, or
    a value out of range); else ApiError 400. Whatever the cursor (nested
    deep, a date at the edge of the calendar, a lone surrogate), never a 500."""
    try:
        if len(cursor) > MAX_CHARS:
            raise ValueError("too long")
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        return check(json.loads(raw))
    except (binascii.Error, ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError):
        raise ApiError(400, "invalid", "cursor must be a cursor from a previous page") from None
