"""Caps on what one submission may carry, and the checks of its values,
shared by every entry point (the Python client, the API, the dashboard form,
`queue_submit`, Django Tasks, periodic requests) and by the worker for the
results it stores, so each refuses the same input with the same message:

* depth: at most MAX_DEPTH levels of lists and objects (deeper values break
  Python's recursion in every JSON encoder and template that touches them);
* numbers: finite only (NaN and Infinity are not JSON: the results endpoint
  would emit invalid JSON);
* text: valid Unicode (below);
* size: MAX_ITEM_BYTES as JSON text (items; results are not capped).

Text that is not valid Unicode means lone surrogates (U+D800..U+DFFF on their
own): Python strings and JSON allow them, but they cannot be encoded as UTF-8,
so Redis could never store them. NUL bytes, right-to-left marks and any other
code point are fine.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable

from queueadmin.core.engine.errors import QueueError

MAX_ITEMS_PER_REQUEST = 1_000_000  # items per submit (or per add to a streamed request)
MAX_ITEM_BYTES = 2 * 1024 * 1024  # an item's JSON encoding, in UTF-8 bytes (a 1 MB string fits)
MAX_DEDUP_KEY_CHARS = 200  # the database keeps this many characters of a de-dup key
MAX_DEPTH = 64  # levels of nested lists and objects in an item or a result (a bare value is 0)


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # one, not one per call
_STRICT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')  # JSON string literals (their brackets are not nesting)


def encode(item: Any) -> str:
    """An item as the JSON text stored in Redis."""
    return _ENCODER.encode(item)


def encode_value(value: Any, what: str) -> str:
    """`value` as JSON text, or QueueError (naming it `what`) when it is not
    JSON (a set, bytes, a cycle), holds NaN or Infinity, is nested deeper
    than MAX_DEPTH or holds text that is not valid Unicode. Never raises
    anything else, whatever the value (a RecursionError becomes "too deep")."""
    try:
        text = _STRICT.encode(value)
    except RecursionError:
        raise QueueError(f"{what} is nested too deeply (more than {MAX_DEPTH} levels of lists and objects)") from None
    except Exception as exc:  # TypeError (not JSON), ValueError (a cycle, NaN), whatever a strange object raises
        why = oneline(exc)
        if why.startswith("Out of range float"):
            raise QueueError(f"{what} holds NaN or Infinity, which JSON cannot carry") from None
        raise QueueError(f"{what} cannot be stored as JSON: {why}") from None
    if depth(text) > MAX_DEPTH:
        raise QueueError(f"{what} is nested too deeply (more than {MAX_DEPTH} levels of lists and objects)")
    if not text.isascii() and utf8_size(text) is None:
        raise QueueError(f"{what} is not valid Unicode text (it holds a lone surrogate)")
    return text


def depth(text: str) -> int:
    """How deep the JSON text `text` nests lists and objects: 0 when it
    cannot be deeper than MAX_DEPTH (the usual value: too few brackets),
    else counted up to MAX_DEPTH + 1, each pass dropping the innermost
    pairs (in C: no Python loop over the text)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0
    brackets, level = _STRINGS.sub("", text).translate(_BRACKETS), 0
    while brackets and level <= MAX_DEPTH:
        brackets, level = brackets.replace("[]", ""), level + 1
    return level


# outside its strings, JSON text is ASCII: keep its brackets only, objects' as lists'
_BRACKETS = {c: None for c in range(0x80) if chr(c) not in "[]{}"} | {ord("{"): "[", ord("}"): "]"}


def oneline(exc: BaseException) -> str:
    try:
        return " ".join(str(exc).split())[:200] or type(exc).__name__
    except Exception:  # an exception whose text cannot be made
        return type(exc).__name__


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
    """The item encoded for Redis, or QueueError (naming it `what`) when
    `encode_value` refuses it or it is larger than MAX_ITEM_BYTES."""
    text = encode_value(item, what)
    size = utf8_size(text)
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
