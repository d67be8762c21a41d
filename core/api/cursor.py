"""Opaque page cursors: a JSON value (the last row's sort key) in URL-safe
base64. A cursor that does not decode is a 400, never a wrong page."""
from __future__ import annotations

import base64
import binascii
import json

from .errors import ApiError


def encode(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def decode(cursor: str, check=lambda value: value):
    """The value, passed through `check` (which raises on a wrong shape); else ApiError 400."""
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        return check(json.loads(raw))
    except (binascii.Error, ValueError, TypeError, KeyError, IndexError):
        raise ApiError(400, "invalid", "cursor must be a cursor from a previous page") from None
