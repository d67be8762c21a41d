"""Dead letters by filter: which ones match an error text, a processor, a
queue and a time range, read in bounded chunks with a cursor, so that a page
or a bulk job stays cheap at 100,000 dead letters.

A request's dead letters are its `dead` ZSET (entry id -> item index; far
larger scores are the times of letters written before it was scored by
index) and their records are its `results` HASH (index -> JSON with error,
traceback, attempts, finished_at). Queue and processor are the request's, so
they narrow the requests looked at; error text and time need each letter's
record, so those filters read records, at most `budget` letters a call.

A cursor is "<position in the request list>:<last score seen>". Scores are
walked with an exclusive lower bound, not by rank, so letters that leave the
ZSET meanwhile (retried, discarded: what a bulk job does) shift nothing.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field

from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features import encryption

LEGACY_SCORE = 10**11  # scores above this are times in ms, not item indices
CHUNK = 500  # letters read per round trip
START = "0:-1"
MAX_TEXT = 200
NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")  # queue and processor names, dotted paths
CURSOR = re.compile(r"^(\d{1,7}):(-1|\d{1,16})$")


def parse_cursor(cursor: str | None) -> tuple[int, int]:
    """(position, last score); QueueError for anything but a cursor this module made."""
    m = CURSOR.match(cursor or START)
    if not m:
        raise QueueError("cursor must be one this search returned (\"position:score\")")
    return int(m[1]), int(m[2])


@dataclass(frozen=True)
class DeadFilter:
    """What a dead letter must be to match; empty fields match anything.
    `since`/`until` are Unix seconds, compared with the time it failed."""
    text: str = ""
    processor: str = ""
    queue: str = ""
    since: float | None = None
    until: float | None = None

    @classmethod
    def checked(cls, text="", processor="", queue="", since=None, until=None) -> "DeadFilter":
        """A filter from outside input, or QueueError saying what is wrong."""
        text = str(text or "").strip()
        if len(text) > MAX_TEXT or any(ord(c) < 32 for c in text):
            raise QueueError(f"the error text is at most {MAX_TEXT} characters, without control characters")
        for what, value in (("processor", processor), ("queue", queue)):
            if value and not NAME.match(str(value)):
                raise QueueError(f"{what} must be a name of letters, digits and . _ : -")
        for what, value in (("from", since), ("to", until)):
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                      or not math.isfinite(value) or not 0 <= value < 10**11):
                raise QueueError(f"the {what} time must be a time after 1970")
        if since is not None and until is not None and since > until:
            raise QueueError("the from time is after the to time")
        return cls(text, str(processor or ""), str(queue or ""), since, until)

    @property
    def reads_records(self) -> bool:
        """Whether matching needs each letter's record (text or time)."""
        return bool(self.text) or self.since is not None or self.until is not None

    def wants(self, rec: dict) -> bool:
        if self.text and self.text.casefold() not in str(rec.get("error") or "").casefold():
            return False
        if self.since is None and self.until is None:
            return True
        at = rec.get("finished_at")
        if not isinstance(at, (int, float)) or isinstance(at, bool):
            return False  # a letter with no time is in no time range
        return (self.since is None or at >= self.since) and (self.until is None or at <= self.until)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "DeadFilter":
        return cls.checked(**json.loads(text or "{}"))


@dataclass
class Letter:
    request: str
    entry: str
    score: int
    index: int | None = None
    record: dict = field(default_factory=dict)

    @property
    def pair(self) -> str:
        return f"{self.request}:{self.entry}"


@dataclass
class Scanned:
    """One bounded walk: the first `keep` matches, how many matched and were
    looked at, where the next page starts (None: no more) and where the walk
    stopped (None: it reached the end, so `matched` is exact)."""
    letters: list[Letter]
    matched: int
    looked: int
    next: str | None
    stopped_at: str | None

    @property
    def exact(self) -> bool:
        return self.stopped_at is None


class DeadScan:
    def __init__(self, store, reads):
        self.redis, self.keys, self.reads = store.redis, store.keys, reads

    def narrow(self, rids: list[str], flt: DeadFilter) -> list[tuple[str, int]]:
        """(request, dead letters) of `rids` that have some and whose
        processor matches, newest request first: one round trip. Their sum is
        the exact count of a filter that reads no records."""
        rids = sorted(set(rids), reverse=True)
        pipe = self.redis.pipeline(transaction=False)
        for rid in rids:
            pipe.zcard(self.keys.request(rid).dead)
            pipe.hget(self.keys.request(rid).meta, "processor")
        answers = pipe.execute()
        out = []
        for i, rid in enumerate(rids):
            n, processor = answers[2 * i], answers[2 * i + 1]
            if n and (not flt.processor or processor == flt.processor):
                out.append((rid, n))
        return out

    def scan(self, rids: list[str], flt: DeadFilter, cursor: str | None = None, *, budget: int = 5000,
             keep: int = 50, full: bool = True) -> Scanned:
        """Walk the dead letters of `rids` (in that order) from `cursor`,
        looking at no more than `budget` of them. `full`: the kept letters
        carry their records (a page shows them; a bulk job needs ids only)."""
        pos, after = parse_cursor(cursor)
        kept, matched, looked, last_kept = [], 0, 0, None
        with_records = full or flt.reads_records
        while pos < len(rids) and looked < budget:
            rid, want = rids[pos], min(CHUNK, budget - looked)
            chunk = self.redis.zrangebyscore(self.keys.request(rid).dead, f"({after}", "+inf",
                                             start=0, num=want, withscores=True)
            letters = [Letter(rid, eid, int(score)) for eid, score in chunk]
            if with_records:
                self._read(rid, letters)
            for letter in letters:
                looked += 1
                if flt.wants(letter.record):
                    matched += 1
                    if len(kept) < keep:
                        kept.append(letter)
                        last_kept = f"{pos}:{letter.score}"
            after = letters[-1].score if letters else after
            if len(letters) < want:  # this request has no more
                pos, after = pos + 1, -1
        stopped = f"{pos}:{after}" if pos < len(rids) else None
        full_page = keep and len(kept) == keep and (matched > keep or stopped)
        return Scanned(kept, matched, looked, last_kept if full_page else stopped, stopped)

    def _read(self, rid: str, letters: list[Letter]) -> None:
        """Each letter's index and record: one HMGET (and, for letters scored
        by time, one read of their items to learn their index)."""
        legacy = [x for x in letters if x.score > LEGACY_SCORE]
        for letter in letters:
            letter.index = None if letter.score > LEGACY_SCORE else letter.score
        if legacy:
            for letter, item in zip(legacy, self.reads.items_at([(rid, x.entry) for x in legacy])):
                letter.index = int(item["index"]) if item else None
        known = [x for x in letters if x.index is not None]
        if not known:
            return
        raws = self.redis.hmget(self.keys.request(rid).results, [x.index for x in known])
        for letter, raw in zip(known, raws):
            letter.record = _loads(raw)


def _loads(raw) -> dict:
    """A stored record, or {} for one that is missing or not a JSON object."""
    try:
        rec = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    # an encrypted queue's error opened, so the text filter matches it (encryption.py)
    return encryption.open_record(rec) if isinstance(rec, dict) else {}
