"""What a running item says: `ctx.log(message)` and the standard `logging`
calls its handler makes while it runs are captured for that item (up to
LOG_CAP bytes, with a note when cut) and stored with its result record.

The item being run is a context variable, set by the executor around each
run: a thread runs one item at a time, and each asyncio task has its own
context, so records land with the right item whichever runs them.
"""
from __future__ import annotations

import contextvars
import logging
import threading

LOG_CAP = 64 * 1024  # characters kept per item; the rest is dropped with a note
CUT_NOTE = "… (log cut at {cap} characters)"

current: contextvars.ContextVar = contextvars.ContextVar("queueadmin_item", default=None)

_installed = threading.Lock()
_handler: logging.Handler | None = None


class ItemLog:
    """One item's captured lines."""

    __slots__ = ("lines", "size", "cut")

    def __init__(self):
        self.lines: list[str] = []
        self.size = 0
        self.cut = False

    def add(self, text: str) -> None:
        if self.cut:
            return
        room = LOG_CAP - self.size
        if len(text) + 1 > room:
            self.lines.append(text[:max(0, room)])
            self.lines.append(CUT_NOTE.format(cap=LOG_CAP))
            self.cut = True
            return
        self.lines.append(text)
        self.size += len(text) + 1

    def text(self) -> str:
        return "\n".join(self.lines)


class CaptureHandler(logging.Handler):
    """Sends records made while an item runs to that item's log."""

    def __init__(self):
        super().__init__(level=logging.INFO)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        item = current.get()
        if item is None:
            return
        try:
            item.log.add(self.format(record))
        except Exception:  # a record that cannot be formatted must not fail the item
            self.handleError(record)


def install() -> None:
    """Once per process: capture INFO and above from every logger while
    items run (the root logger is lowered to INFO if it was higher; records
    outside items go nowhere new)."""
    global _handler
    with _installed:
        if _handler is not None:
            return
        _handler = CaptureHandler()
        root = logging.getLogger()
        root.addHandler(_handler)
        if root.level > logging.INFO:
            root.setLevel(logging.INFO)
