"""An item a worker holds: what it is, the context its processor may use, and
how its run becomes the result record that `ack` stores.

An item is held from `take` until its outcome reaches Redis. While it runs,
`state` is RUNNING and `stop_reason` says why it is being stopped, if it is
(time limit, an operator, its request cancelled); the watchdog sets it, the
executor raises `Interrupt` in the item's thread or cancels its task.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from queueadmin.core.engine.runtime.itemlog import ItemLog

WAITING, RUNNING, FINISHED = 0, 1, 2


class Interrupt(BaseException):
    """Raised inside a running handler's thread to stop it (a BaseException, so
    a handler's `except Exception` does not swallow it)."""


STOP_ERRORS = {
    "time limit": "TimeLimitExceeded: the item ran longer than its time limit of {limit:g}s",
    "stopped": "Stopped: stopped by an operator",
    "cancelled": "Cancelled: its request was cancelled while it ran",
}


@dataclass(eq=False)
class Item:
    queue: str
    token: str
    rid: str
    entry: str
    index: int
    payload: str
    attempt: int
    processor: str
    limit: float = 0.0  # seconds the item may run (0 = no limit)
    priority: int = 0  # its request's, when taken
    lean: bool = False  # its request is one item (nothing to go on with: keeping.py)
    claimed: float = field(default_factory=time.monotonic)  # when its token came out of the queue (keeping.py)
    started: float = field(default_factory=time.time)
    state: int = WAITING
    kind: str = "thread"  # or "task" (an async processor on the event loop)
    stop_reason: str | None = None
    stop_at: float = 0.0  # monotonic time the stop was asked for
    thread_id: int = 0
    task: Any = None
    renewed: float = field(default_factory=time.monotonic)  # last lease renewal (monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    reported: bool = False
    lease_lost: bool = False  # a renewal found it held elsewhere (leases.py)
    log: ItemLog = field(default_factory=ItemLog, repr=False)  # ctx.log and logging while it runs
    progress: float | None = None  # ctx.progress: 0..1
    note: str = ""
    headers: dict | None = None  # its request's headers, read only when a hook wants them (hooks.py)
    worker: str = ""  # the id of the worker holding it (for hooks: otel.py's spans)

    def elapsed(self, now: float | None = None) -> float:
        return (now or time.time()) - self.started

    def over_limit(self, now: float) -> bool:
        return self.limit > 0 and self.state == RUNNING and now - self.started > self.limit

    def stop_error(self) -> str:
        return STOP_ERRORS.get(self.stop_reason or "", "Stopped").format(limit=self.limit)


class ItemContext:
    """What a processor may use: its attempt number, a lease extension, its
    own log and progress."""

    def __init__(self, worker, item: Item):
        self._worker, self.item = worker, item
        self.attempt, self.request_id, self.index = item.attempt, item.rid, item.index

    def extend_lease(self, seconds: float) -> bool:
        return self._worker.extend_lease(self.item, seconds)

    def log(self, message: str) -> None:
        """A line for this item's log (kept with its result, shown on its page)."""
        self.item.log.add(str(message))

    def progress(self, fraction: float, note: str = "") -> None:
        """How far the item is (0..1), with an optional note: shown live on
        the in-flight and request pages."""
        value = float(fraction)
        if not 0 <= value <= 1:
            raise ValueError("progress is a fraction between 0 and 1")
        self.item.progress, self.item.note = value, str(note)[:200]


@dataclass
class Ran:
    """How one run ended: a result, or an error with its traceback."""

    item: Item
    result: Any = None
    error: str | None = None
    traceback: str = ""
    finished: float = field(default_factory=time.time)
    exc: BaseException | None = field(default=None, repr=False)  # what the processor raised, for hooks

    @property
    def ok(self) -> bool:
        return self.error is None


def record(status: str, body: str, attempts: int, worker: str, started: float, finished: float) -> str:
    """An item's result record as JSON text (built directly: this runs per item).
    `body` is its own members as JSON text (`"result":...` or `"error":...`,
    already checked: limits.encode_value); `worker` is the worker id already
    encoded as JSON."""
    return (f'{{"status":"{status}",{body},"attempts":{attempts},"worker":{worker},'
            f'"started_at":{started:.6f},"finished_at":{finished:.6f}}}')


class Held:
    """The items a worker holds, by token: from `take` until their outcome
    reached Redis (or they were handed back). The dispatcher adds and
    removes; the lease keeper reads (a copy of the values)."""

    __slots__ = ("_items",)

    def __init__(self):
        self._items: dict[str, Item] = {}

    def add(self, item: Item) -> None:
        self._items[item.token] = item

    def drop(self, item: Item) -> None:
        self._items.pop(item.token, None)

    def holds(self, item: Item) -> bool:
        return self._items.get(item.token) is item

    def items(self) -> list[Item]:
        return list(self._items.values())

    def __len__(self) -> int:
        return len(self._items)
