"""The API's limits, read from the settings at each use (so a deployment,
or a test, can change them; defaults in queueadmin.core.conf):

* API_MAX_BODY_BYTES: a request body from a usable token (64 MiB).
* API_ANON_MAX_BODY_BYTES: a body sent without a usable token (16 KiB): it is
  refused with 413 before it is read (core.bodylimit).
* API_SMALL_BODY_BYTES: the body of a steering call (priority, concurrency).
* API_MAX_ITEMS: items per submitted request.
* API_MAX_ITEM_BYTES: one item as JSON text, in UTF-8 bytes (a 1 MB string fits).
* API_MAX_DEDUP_KEY_CHARS: the de-dup key (the database keeps 200 characters).
* API_RATE_LIMIT: requests per token, "N/s", "N/min", "N/h" or "N/day"; "" or
  "0" turns it off.
"""
from __future__ import annotations

from queueadmin.core import conf

MAX_SECONDS = 10 * 365 * 86400  # delays, expiries and time limits: at most 10 years


def cap(name: str) -> int:
    return int(conf.get(name))


def rate_limit() -> str:
    return str(conf.get("API_RATE_LIMIT") or "")
