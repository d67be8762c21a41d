"""A round trip: commands and script calls queued on one pipeline, sent
together, each answer read by whoever queued its call.

Whoever puts a call on the trip keeps what it got back, an `Answer`, and
reads `answer.value` once the trip ran: no one counts positions in the
pipeline's answer list. The typed script calls (the store's slot modules)
return an Answer when given a trip; a plain command is queued on
`trip.pipe` and its answer taken with `trip.answer()` right after.

Script calls that meet NOSCRIPT (Redis restarted or was flushed) are loaded
and sent again by `Scripts.execute`; any other error is raised by `run`, and
nothing of the trip counts as answered.
"""
from __future__ import annotations

from typing import Any, Callable


class Trip:
    __slots__ = ("pipe", "scripts", "results")

    def __init__(self, redis, scripts):
        self.pipe = redis.pipeline(transaction=False)
        self.scripts = scripts
        self.results: list | None = None

    def script(self, name: str, keys: list[str], args: list, decode: Callable) -> "Answer":
        """Queue a script call (the typed calls do, through `Scripts.run`)."""
        return Answer(self, self.scripts.pipe(self.pipe, name, keys, args), decode)

    def answer(self, decode: Callable | None = None) -> "Answer":
        """The answer of the command just queued on `pipe`."""
        return Answer(self, len(self.pipe.command_stack) - 1, decode)

    def __len__(self) -> int:
        return len(self.pipe.command_stack)

    def run(self) -> None:
        """Send the trip and keep its answers (raises what Redis raised)."""
        self.results = self.scripts.execute(self.pipe) if len(self.pipe.command_stack) else []


class Answer:
    """One call's answer, decoded when read (after the trip ran)."""

    __slots__ = ("trip", "at", "decode")

    def __init__(self, trip: Trip, at: int, decode: Callable | None):
        self.trip, self.at, self.decode = trip, at, decode

    @property
    def value(self) -> Any:
        raw = self.trip.results[self.at]
        return raw if self.decode is None else self.decode(raw)
