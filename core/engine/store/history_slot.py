"""The typed call of the metrics history's script, slot ``{h:SERIES}`` (one
series' minute and hour points; keys.Keys' history keys). The only place
its KEYS and ARGV are spelled (see request_slot.py for the shape)."""
from __future__ import annotations

from queueadmin.core.engine.store.keys import Keys
from queueadmin.core.engine.store.scripts import Scripts
from queueadmin.core.engine.store.trip import Trip


def _none(raw) -> None:
    return None


class HistoryScripts:
    def __init__(self, scripts: Scripts, keys: Keys):
        self.scripts, self.keys = scripts, keys

    def history_add(self, series: str, minute: int, delta: str, keep_minutes_s: int, keep_hours_s: int,
                    trip: Trip | None = None):
        """history_add-2: add `delta` ("name=count ...") to the point of
        `minute` (minutes since the epoch) and to that of its hour."""
        hour, day = minute // 60, minute // 1440
        keys = [self.keys.history_minutes(series, hour), self.keys.history_hours(series, day)]
        return self.scripts.run(trip, "history_add", keys,
                                [minute % 60, hour % 24, delta, keep_minutes_s, keep_hours_s], _none)
