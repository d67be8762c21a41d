"""The API's JSON body parser: UTF-8 text holding one JSON object, standard
JSON only (no NaN or Infinity), and valid Unicode in every string.

Lone surrogates ("\\ud800" as a JSON escape) are valid JSON but not valid
Unicode: they could never be stored as UTF-8, so they are refused here with
the place they were found, before any check looks at the values.
"""
from __future__ import annotations

import json
import re

from ninja.parser import Parser

from .errors import ApiError

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")  # the only way JSON text can spell one
_SURROGATE = re.compile("[\ud800-\udfff]")  # after decoding, a pair became one code point: any left is lone


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def parse_object(raw: bytes) -> dict:
    """The body as a dict, or ApiError(400) saying what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "malformed_json", "malformed JSON: the body is not UTF-8 text") from None
    if not text.strip():
        raise ApiError(400, "empty_body", "empty body: send a JSON object")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ApiError(400, "malformed_json", "malformed JSON: nested too deeply") from None
    except ValueError as exc:
        raise ApiError(400, "malformed_json", f"malformed JSON: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        kind = {list: "a list", str: "a string", type(None): "null", bool: "a boolean"}.get(type(data), "a number")
        raise ApiError(400, "not_an_object", f"the body must be a JSON object, not {kind}")
    if _SURROGATE_ESCAPE.search(raw):
        where = lone_surrogate(data)
        if where is not None:
            raise ApiError(400, "bad_unicode", f"{where[:200]} is not valid Unicode text: it holds a lone surrogate "
                                               "(a \\uD800-\\uDFFF escape without its pair)")
    return data


def lone_surrogate(value, path: str = "") -> str | None:
    """Where the first string (value or key) holding a lone surrogate is, as
    `items[3].name`, or None. Iterative: depth is bounded only by the parser."""
    stack = [(value, path)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, str):
            if _SURROGATE.search(node):
                return at or "the body"
        elif isinstance(node, dict):
            for key in node:
                if _SURROGATE.search(key):
                    return f"a field name in {at or 'the body'}"
            stack.extend((v, f"{at}.{k}" if at else k) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((v, f"{at}[{i}]") for i, v in reversed(list(enumerate(node))))
    return None


class JsonParser(Parser):
    def parse_body(self, request) -> dict:
        return parse_object(request.body)
