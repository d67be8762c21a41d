"""Caps on what one submission may carry, and the check that text is valid
Unicode, shared by every entry point (the Python client, the API, the
dashboard form, `queue_submit`), so each refuses the same input with the same
message.

Text that is not valid Unicode means lone surrogates (U+D800..U+DFFF on their
own): Python strings and JSON allow them, but they cannot be encoded as UTF-8,
so Redis could never store them. NUL bytes, right-to-left marks and any other
code point are fine.
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from .errors import QueueError

MAX_ITEMS_PER_REQUEST = 1_000_000  # items per submit (or per add to a streamed request)
MAX_ITEM_BYTES = 2 * 1024 * 1024  # an item's JSON encoding, in UTF-8 bytes (a 1 MB string fits)
MAX_DEDUP_KEY_CHARS = 200  # the database keeps this many characters of a de-dup key


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # one, not one per call


def encode(item: Any) -> str:
    """An item as the JSON text stored in Redis."""
    return _ENCODER.encode(item)


def utf8_size(text: str) -> int | None:
    """The UTF-8 size of `text`, or None when it holds a lone surrogate."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def check_text(text: str, what: str) -> str:
    """`text` itself, or QueueError when it is not valid Unicode."""
    if not isinstance(text, str):
        raise QueueError(f"{what} must be text")
    if utf8_size(text) is None:
        raise QueueError(f"{what} is not valid Unicode text (it holds a lone surrogate)")
    return text


def check_dedup_key(key: str | None) -> str | None:
    if key is None:
        return None
    check_text(key, "the de-dup key")
    if len(key) > MAX_DEDUP_KEY_CHARS:
        raise QueueError(f"the de-dup key is longer than {MAX_DEDUP_KEY_CHARS} characters")
    return key


def check_item(item: Any, what: str) -> str:
    """The item encoded for Redis, or QueueError (naming it `what`) when it is
    not JSON-encodable, not valid Unicode, or larger than MAX_ITEM_BYTES."""
    try:
        text = encode(item)
    except (TypeError, ValueError, RecursionError) as exc:  # a set, bytes, a circular list...
        raise QueueError(f"{what} cannot be stored as JSON: {' '.join(str(exc).split())[:200]}") from None
    size = utf8_size(text)
    if size is None:
        raise QueueError(f"{what} is not valid Unicode text (it holds a lone surrogate)")
    if size > MAX_ITEM_BYTES:
        raise QueueError(f"{what} is larger than {MAX_ITEM_BYTES // (1024 * 1024)} MiB ({size:,} bytes as JSON)")
    return text


def check_count(n: int) -> None:
    if n > MAX_ITEMS_PER_REQUEST:
        raise QueueError(f"at most {MAX_ITEMS_PER_REQUEST:,} items per request ({n:,} given)")


def payloads(items: Iterable[Any]) -> list[str]:
    """Items encoded for Redis, each checked by `check_item` (named by its
    0-based position), at most MAX_ITEMS_PER_REQUEST of them."""
    out: list[str] = []
    for n, item in enumerate(items):
        if n >= MAX_ITEMS_PER_REQUEST:
            raise QueueError(f"at most {MAX_ITEMS_PER_REQUEST:,} items per request")
        out.append(check_item(item, f"item {n}"))
    return out
