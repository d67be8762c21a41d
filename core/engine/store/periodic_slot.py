"""The typed calls of the scripts of periodic requests, slot ``{periodic}``
(definitions, due times, claims and state; keys.PeriodicKeys). One method
per script, named as the script: the only place its KEYS and ARGV are
spelled and its answer decoded (see request_slot.py for the shape).
"""
from __future__ import annotations

import enum
from typing import NamedTuple

from queueadmin.core.engine.store.keys import Keys
from queueadmin.core.engine.store.scripts import Scripts
from queueadmin.core.engine.store.trip import Trip


class Defined(enum.IntEnum):
    """What periodic_define-3 did."""

    KEPT = 0  # definition updated, due time kept
    SCHEDULED = 1  # (re)scheduled at the next due time given
    REMOVED = 2


class PeriodicClaim(NamedTuple):
    """A periodic_claim-3 answer."""

    now_ms: int  # by the server's clock
    due: list[tuple[str, int, str]]  # (name, due ms, definition JSON) of each entry claimed


def _claim(raw) -> PeriodicClaim:
    return PeriodicClaim(int(raw[0]), [(raw[n], int(raw[n + 1]), raw[n + 2]) for n in range(1, len(raw), 3)])


def _defined(raw) -> Defined:
    return Defined(int(raw))


def _flag(raw) -> bool:
    return raw == 1


class PeriodicScripts:
    def __init__(self, scripts: Scripts, keys: Keys):
        self.scripts, self.keys = scripts, keys

    def periodic_define(self, name: str, definition: str, timing: str, next_ms: int, trip: Trip | None = None):
        """periodic_define-3: publish, change or (with definition "") remove
        a schedule -> Defined."""
        pk = self.keys.periodic
        return self.scripts.run(trip, "periodic_define", [pk.defs, pk.due, pk.claims],
                                [name, definition, timing, next_ms], _defined)

    def periodic_claim(self, batch: int, lease_ms: int, token: str, trip: Trip | None = None):
        """periodic_claim-3: the schedules due now, this claimer's (`token`)
        for `lease_ms` -> PeriodicClaim."""
        pk = self.keys.periodic
        return self.scripts.run(trip, "periodic_claim", [pk.due, pk.claims, pk.defs], [batch, lease_ms, token], _claim)

    def periodic_done(self, name: str, token: str, next_ms: int, state: str, trip: Trip | None = None):
        """periodic_done-4: record a fire (`state` JSON, "" leaves it) and put
        the schedule back at `next_ms` -> False when the claim was no longer ours."""
        pk = self.keys.periodic
        return self.scripts.run(trip, "periodic_done", [pk.due, pk.claims, pk.defs, pk.state],
                                [name, token, next_ms, state], _flag)

    def periodic_repair(self, missing: list[tuple[str, str, int]], trip: Trip | None = None):
        """periodic_repair-2: schedules missing from `due` put back, (name,
        definition as read, next due ms) each -> how many."""
        pk = self.keys.periodic
        return self.scripts.run(trip, "periodic_repair", [pk.defs, pk.due], [x for t in missing for x in t], int)
