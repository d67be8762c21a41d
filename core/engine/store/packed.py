"""A waiting one-item request, packed (docs/keys.md).

`submit_one` makes a one-item request as its meta hash alone: the payload in
field ``p``, and none of the fields every such request has at first. The
first script that takes or cancels it unpacks it (``unpack_lean`` in
lua/_request.lua): the meta gets those fields, and the item its own small
hash. Readers here see a packed request exactly as an unpacked one.
"""
from __future__ import annotations

import time

PAYLOAD = "p"  # the meta field that holds a packed request's payload
# What unpack_lean adds to the meta (besides `id`), as Redis returns it.
DEFAULTS = {"finalized": "1", "done": "0", "failed": "0", "expired": "0", "total": "1", "dedup_key": ""}


def unpacked_meta(rid: str, meta: dict) -> dict:
    """The meta hash as unpack_lean would leave it ({} stays {})."""
    if PAYLOAD not in meta:
        return meta
    out = {**DEFAULTS, **meta, "id": rid}
    del out[PAYLOAD]
    return out


def item_of(payload: str, created_at: str) -> dict:
    """The item hash unpack_lean would make (lua/_request.lua's lean layout)."""
    return {"i": "0", "p": payload, "e": f"{created_at}-0", "d": "0"}


def unpacked_values(fields: tuple | list, values: list) -> list:
    """Meta fields read by name (HMGET, SORT ... GET), as they would be
    unpacked: when `fields` include "total", a meta that has some of them
    but no total is packed, and gets the defaults."""
    if "total" not in fields:
        return values
    if values[fields.index("total")] is not None or all(v is None for v in values):
        return values
    return [DEFAULTS.get(f) if v is None else v for f, v in zip(fields, values)]


# A worker that reads packed requests says so in its queues' `can` hashes
# (routing.py), a line of its own beside the processors it can run.
WORKER_MARK = "\x00packed"
GATE_SECONDS = 5.0  # how long a producer trusts what it read of a queue's workers


class PackedGate:
    """Whether a producer may make a queue's one-item requests packed: not
    while a worker of an older release serves the queue (its `can` entry
    lacks WORKER_MARK), which would find neither the item nor the reqs entry
    and drop the request. Such a producer asks submit_one for the full lean
    layout (it sends the id). Read once per GATE_SECONDS per queue."""

    def __init__(self, redis, keys):
        self.redis, self.keys = redis, keys
        self._known: dict[str, tuple[float, bool]] = {}

    def allows(self, queue: str) -> bool:
        now = time.monotonic()
        known = self._known.get(queue)
        if known is None or now - known[0] > GATE_SECONDS:
            workers = self.redis.hvals(self.keys.queue(queue).can)
            known = self._known[queue] = (now, all(WORKER_MARK in text for text in workers))
        return known[1]

    def forget(self) -> None:
        self._known.clear()
