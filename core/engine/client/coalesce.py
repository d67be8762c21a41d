"""Concurrent submissions share round trips (group commit).

Threads that submit one-item requests at the same moment (a web server's
threads, Django Tasks' `aenqueue`, which submits on a pool thread, an
`asyncio.gather` of them) would each wait for their own round trip. Here
the first caller leads: it sends every call that is waiting, its own
included, on one pipeline, and wakes the others with their answers. Calls
that arrive while a batch is on the wire wait for the next one, which the
first of them leads. A lone caller sends its call as it would without this
(no pipeline, no wait): it costs nothing when nothing is concurrent.

Each call's answer is its own: a script's refusal goes to its caller only;
a connection error fails every call of that batch, as it would have failed
each of them alone.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

MAX_BATCH = 256  # calls per round trip; the rest go with the next one


class _Call:
    __slots__ = ("make", "done", "lead", "value", "error")

    def __init__(self, make: Callable):
        self.make = make  # make(trip) queues the call on a trip; make(None) runs it alone
        self.done: threading.Event | None = None  # made only for a call that waits: a lone call needs none
        self.lead = False
        self.value: Any = None
        self.error: BaseException | None = None


class Coalescer:
    def __init__(self, new_trip: Callable):
        self._new_trip = new_trip
        self._lock = threading.Lock()
        self._waiting: list[_Call] = []
        self._sending = False
        self.trips = 0  # round trips sent, for the tests and the bench

    def call(self, make: Callable) -> Any:
        """`make(trip)` queues one call on `trip` and returns its Answer;
        `make(None)` runs it alone and returns its value. Returns the value
        (or raises what the call raised)."""
        me = _Call(make)
        with self._lock:
            self._waiting.append(me)
            me.lead = not self._sending
            self._sending = True
            if not me.lead:
                me.done = threading.Event()
        if not me.lead:
            me.done.wait()
        if me.lead:  # first in, or handed the lead by the batch before
            self._send()
        if me.error is not None:
            raise me.error
        return me.value

    def _send(self) -> None:
        with self._lock:
            batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
        self.trips += 1
        if len(batch) == 1:
            _alone(batch[0])
        else:
            _together(batch, self._new_trip())
        with self._lock:
            nxt = self._waiting[0] if self._waiting else None
            if nxt is None:
                self._sending = False
            else:
                nxt.lead = True  # it sends the next batch, once woken
        if nxt is not None:
            nxt.done.set()
        for c in batch:
            if c.done is not None:
                c.done.set()


def _alone(c: _Call) -> None:
    try:
        c.value = c.make(None)
    except BaseException as exc:  # noqa: BLE001 - handed to its caller
        c.error = exc


def _together(batch: list[_Call], trip) -> None:
    answers = []
    for c in batch:
        try:
            answers.append(c.make(trip))
        except BaseException as exc:  # noqa: BLE001 - its own error only
            c.error = exc
            answers.append(None)
    try:
        trip.run()
    except BaseException as exc:  # noqa: BLE001 - the whole trip failed: every call did
        for c in batch:
            c.error = c.error or exc
        return
    for c, answer in zip(batch, answers):
        if answer is not None:
            try:
                c.value = answer.value
            except BaseException as exc:  # noqa: BLE001
                c.error = exc
