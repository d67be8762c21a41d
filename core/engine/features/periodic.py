"""Periodic requests: a schedule (cron expression or fixed interval) that
submits an ordinary request at each due time, exactly once however many
workers and web processes run. No Django in here; the admin model is
core.models.PeriodicRequest and it publishes definitions through `define`.

Redis (keys.PeriodicKeys, one hash tag ``{periodic}``):

* ``defs``: name -> definition JSON, for enabled schedules only;
* ``due``: name -> next due time (ms), the sorted set workers claim from;
* ``claims``: name -> "due_ms|token" while a claimer fires that due time;
* ``state``: name -> JSON of the last fire (due, time, request id, error).

Firing (any worker, each upkeep pass, `run`): ``periodic_claim`` atomically
takes the entries that are due, scores each by a claim deadline and records
the due time it stands for; the worker submits the request(s), computes the
next due time (croniter: Lua cannot) and ``periodic_done`` puts the entry
back there. A worker that dies in between leaves the claim to lapse: the
next claimer fires the same due time again, and since the request id is
derived from schedule and due time (`request_id`), `create` finds it made
already and no second request appears. Each request's de-dup key names the
schedule and due time too (`dedup_key`).

Unsquattable (issue 20): a fire's de-dup key lives in the periodic scope,
which no submission may use (dedup.py), so nobody can take a due time
first; its request id is keyed with a random secret kept in Redis
(``secret``), so it cannot be computed in advance either.

Downtime: a due time more than a grace (one period, at most a minute) past
when it is claimed was missed. Policy "once" fires one request for all
missed times (keyed by the latest of them), "skip" fires none; due times
within the grace fire normally under both.

Intervals count from the Unix epoch (every 60 s fires on the minute, every
3600 s on the hour, UTC); cron expressions (5 fields, or 6 with seconds
last) are read in the schedule's time zone.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from dataclasses import asdict, dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from redis.exceptions import RedisError

from queueadmin.core.engine import events
from queueadmin.core.engine.client.dedup import PERIODIC, scoped_key
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.client.limits import payloads as checked_payloads
from queueadmin.core.engine.features import groups
from queueadmin.core.engine.states import TERMINAL
from queueadmin.core.engine.store.periodic_slot import Defined
from queueadmin.core.engine.store.queue_slot import EnqueueCode
from queueadmin.core.engine.store.scripts import Code, ScriptError

log = logging.getLogger("queueadmin.worker")

LEASE_MS = 10_000  # a claim not finished within this lapses and the due time is fired again
BATCH = 50  # schedules claimed per call
MAX_GRACE_MS = 60_000  # a due time later than this (or one period) when claimed counts as missed
MAX_FIRES = 100  # on-time due times fired for one claim (a cron firing many times within its grace)
MAX_ITEMS = 2000  # items of one periodic request (one create call)
MAX_ITEMS_BYTES = 1024 * 1024  # a periodic request's items in all (check_volume)
BYTES_PER_SECOND = 1024  # items a schedule may submit per second of its shortest period (check_volume)
ITEM_OVERHEAD = 64  # bytes an item costs beyond its JSON text, counted by check_volume
REPAIR_SECONDS = 30.0  # how often a worker puts back definitions missing from `due`
CATCH_UP = ("once", "skip")


@dataclass(frozen=True)
class Definition:
    """What the admin publishes: everything a worker needs to fire."""

    name: str
    queue: str
    processor: str
    items: list
    priority: int | None = None
    concurrency: int | None = None
    time_limit: float | None = None
    group: str = ""  # the group (tenant) its requests count against (features/groups.py); "" none
    cron: str = ""
    interval: int = 0  # seconds
    tz: str = "UTC"
    catch_up: str = "once"

    @property
    def timing(self) -> str:
        return f"{self.cron}|{self.interval}|{self.tz}"

    def to_json(self) -> str:
        data = asdict(self)
        if not data["group"]:
            del data["group"]  # as before groups: an older worker reads the definition too
        return json.dumps({**data, "timing": self.timing}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Definition":
        data = json.loads(text)
        data.pop("timing", None)
        return cls(**data)

    def check(self) -> None:
        """QueueError naming the first problem (the admin form shows these)."""
        if bool(self.cron) == bool(self.interval):
            raise QueueError("give either a cron expression or an interval, not both")
        if self.interval and (not isinstance(self.interval, int) or self.interval < 1):
            raise QueueError("the interval must be a whole number of seconds, at least 1")
        check_zone(self.tz)
        if self.cron:
            check_cron(self.cron, self.tz)
        if self.catch_up not in CATCH_UP:
            raise QueueError("catch-up must be 'once' or 'skip'")
        if not self.items:
            raise QueueError("a periodic request needs at least one item")
        if len(self.items) > MAX_ITEMS:
            raise QueueError(f"a periodic request has at most {MAX_ITEMS:,} items")
        check_volume(checked_payloads(self.items), self.shortest_period())

    def shortest_period(self) -> int:
        """The least time (s) between two fires: the interval, or a cron
        expression's shortest gap (a minute, unless it has a seconds field)."""
        if self.interval:
            return self.interval
        from croniter import croniter  # here, as in _cron: about 40 ms of import only a cron schedule needs

        fields = croniter.expand(self.cron)[0]
        if len(fields) < 6:
            return 60
        seconds = sorted(range(60) if fields[5] == ["*"] else {int(s) for s in fields[5]})
        gaps = [b - a for a, b in zip(seconds, seconds[1:])] + [60 - seconds[-1] + seconds[0]]
        return min(gaps)

    # -- due times (ms) ---------------------------------------------------------

    def next_after(self, t_ms: int) -> int:
        """The first due time strictly after t_ms."""
        if self.interval:
            step = self.interval * 1000
            return (t_ms // step + 1) * step
        return int(round(_cron(self.cron, self.tz, t_ms).get_next(float) * 1000))

    def latest_at(self, t_ms: int) -> int:
        """The last due time at or before t_ms."""
        if self.interval:
            step = self.interval * 1000
            return t_ms // step * step
        return int(round(_cron(self.cron, self.tz, t_ms + 1).get_prev(float) * 1000))


def check_volume(payloads: list[str], period: int) -> None:
    """What a schedule may pour into Redis: its items (each counted as its
    JSON text plus ITEM_OVERHEAD bytes) at most MAX_ITEMS_BYTES, and at most
    BYTES_PER_SECOND for each second between two fires (a 1 s interval takes
    1 KiB of items, a minute 60 KiB, 17 minutes and more 1 MiB)."""
    size = sum(len(p.encode()) + ITEM_OVERHEAD for p in payloads)
    if size > MAX_ITEMS_BYTES:
        raise QueueError(f"a periodic request's items are at most {MAX_ITEMS_BYTES // 1024:,} KiB "
                         f"({size:,} bytes, counting {ITEM_OVERHEAD} bytes per item)")
    if size > BYTES_PER_SECOND * period:
        raise QueueError(f"items of {size:,} bytes (counting {ITEM_OVERHEAD} per item) need at least "
                         f"{-(-size // BYTES_PER_SECOND):,} s between fires, and this one fires every {period} s: "
                         f"a periodic request may submit {BYTES_PER_SECOND:,} bytes of items per second")


def _cron(expr: str, tz: str, t_ms: int):
    from croniter import croniter  # here: a worker without cron schedules never imports it

    return croniter(expr, datetime.fromtimestamp(t_ms / 1000, ZoneInfo(tz)))


def check_zone(name: str) -> None:
    try:
        if not name or name != name.strip():
            raise ValueError
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise QueueError(f"unknown time zone {name!r} (use a name such as UTC or Europe/Berlin)") from None


def check_cron(expr: str, tz: str = "UTC") -> None:
    from croniter import croniter  # here, as in _cron: about 40 ms of import only a cron schedule needs

    if len(expr) > 100 or not croniter.is_valid(expr):
        raise QueueError(f"not a valid cron expression: {expr!r} (five fields, e.g. '*/15 * * * *', "
                         "or six with seconds last)")
    try:
        _cron(expr, tz, 0).get_next(float)
    except Exception:  # croniter gives up on an expression that never matches (e.g. 30 February)
        raise QueueError(f"the cron expression {expr!r} never comes due") from None


def request_id(client, name: str, due_ms: int) -> str:
    """Derived from schedule and due time, keyed with the secret (unknown
    outside Redis): the same for every claimer, unpredictable to anyone
    else. Time first, so ids sort by due time (31 characters, within the
    dashboard's request id pattern)."""
    mac = hmac.new(_secret(client), f"{name}\x00{due_ms}".encode(), hashlib.blake2b)
    return f"{due_ms:011x}{mac.hexdigest()[:20]}"


def _secret(client) -> bytes:
    """The key of periodic request ids: made once per Redis (SET NX), cached
    per client."""
    cached = getattr(client, "_periodic_secret", None)
    if cached is None:
        key = client.keys.periodic.secret
        client.redis.set(key, secrets.token_hex(32), nx=True)
        raw = client.redis.get(key)
        cached = client._periodic_secret = raw if isinstance(raw, bytes) else raw.encode()
    return cached


def dedup_key(name: str, due_ms: int) -> str:
    """The fire's de-dup key as shown; stored in the periodic scope (dedup.py)."""
    return f"periodic:{name}:{due_ms // 1000 if due_ms % 1000 == 0 else due_ms / 1000}"


def plan(d: Definition, due_ms: int, now_ms: int) -> tuple[list[int], int, int | None]:
    """For a claim of `due_ms` at `now_ms`: the due times to fire, the next
    due time after now, and which fire (if any) stands for missed times."""
    nxt = d.next_after(now_ms)
    grace = min(MAX_GRACE_MS, max(1000, nxt - d.latest_at(now_ms)))
    fires, missed = [], None
    if due_ms <= now_ms - grace and d.catch_up == "once":
        missed = d.latest_at(now_ms - grace)  # one request stands for every missed time
        fires.append(missed)
    t = due_ms if due_ms > now_ms - grace else d.next_after(now_ms - grace)
    while t <= now_ms and len(fires) < MAX_FIRES:
        fires.append(t)
        t = d.next_after(t)
    return fires, nxt, missed


# -- publishing (the admin) ---------------------------------------------------


def server_ms(client) -> int:
    sec, usec = client.redis.time()
    return int(sec) * 1000 + int(usec) // 1000


def define(client, d: Definition) -> bool:
    """Publish an enabled schedule; True if it was (re)scheduled at its next
    due time, False if it kept its place (timing unchanged)."""
    d.check()
    nxt = d.next_after(server_ms(client))
    return client.store.periodic.periodic_define(d.name, d.to_json(), d.timing, nxt) == Defined.SCHEDULED


def remove(client, name: str, forget: bool = False) -> None:
    """Stop a schedule (paused or deleted); `forget` drops its last-run state too."""
    client.store.periodic.periodic_define(name, "", "", 0)
    if forget:
        client.redis.hdel(client.keys.periodic.state, name)


def defined(client, name: str) -> bool:
    return bool(client.redis.hexists(client.keys.periodic.defs, name))


# -- firing (workers) -----------------------------------------------------------


def fire(client, d: Definition, due_ms: int, manual: bool = False, missed: bool = False) -> str:
    """Submit the request of one due time; returns its id (the existing one if
    this due time was fired already). QueueError if the engine refuses it.
    The request's meta names the schedule (`periodic`), its due time
    (`due_at`) and, when it stands for missed times, `caught_up`."""
    rid = request_id(client, d.name + ("\x00now" if manual else ""), due_ms)
    rk = client.keys.request(rid)
    config, priority, concurrency = client.submission.validate(d.queue, d.processor, d.priority, d.concurrency)
    payloads = checked_payloads(d.items)
    if config.encrypt:  # sealed at rest like any submission's (encryption.py)
        from queueadmin.core.engine.features import encryption

        payloads = encryption.seal_all(payloads)
    key = scoped_key(PERIODIC, dedup_key(d.name, due_ms) + (":now" if manual else ""))
    meta = dict(id=rid, queue=d.queue, processor=d.processor, priority=priority, concurrency=concurrency,
                state="queued", dedup_key=key, periodic=d.name, due_at=due_ms)
    if missed:
        meta["caught_up"] = 1
    if d.time_limit is not None:
        meta["time_limit"] = float(d.time_limit)
    group = groups.check_group(d.group or None)
    if group:
        meta["group"] = group
    try:
        client.store.request.create(rid, meta, payloads)
    except ScriptError as exc:
        if exc.code != Code.EXISTS:
            raise
        if client.redis.hget(rk.meta, "state") in TERMINAL:
            return rid  # fired, and already finished
        # made earlier; registering again is a no-op if it was (enqueue answers "already registered"),
        # and registers it if its maker died between the two steps
    try:  # before it can run: a Sentry check-in opens before its request can close it (events.py)
        events.fire(events.PERIODIC_FIRED, events.PeriodicFired(client, d, due_ms, rid, manual, missed))
    except Exception:
        log.exception("periodic request %s due %d: a subscriber failed", d.name, due_ms)
    trip = client.store.trip()
    enqueued = client.submission.enqueue(trip, d.queue, rid, priority, concurrency, key, 0, len(payloads),
                                         group=group)
    trip.run()
    code, other = enqueued.value
    if code == EnqueueCode.DUPLICATE and other != rid:  # this due time fired under another id (the secret was
        client.redis.delete(*rk.all())  # lost): that one stands
        return other
    return rid


def run(client, by: str = "") -> list[tuple[str, int, str]]:
    """Fire every schedule that is due; returns (name, due ms, request id) fired."""
    token = secrets.token_hex(8)
    now_ms, due = client.store.periodic.periodic_claim(BATCH, LEASE_MS, token)
    fired = []
    for name, due_ms, raw in due:
        state: dict = {"due": due_ms, "at": now_ms, "request": "", "error": ""}
        try:
            d = Definition.from_json(raw)
            fires, nxt, missed = plan(d, due_ms, now_ms)
        except Exception as exc:  # a definition we cannot read: try again in a minute, say why
            log.warning("%s: periodic request %s: %s", by or "upkeep", name, exc)
            state["error"], nxt, fires, missed = f"{type(exc).__name__}: {exc}", now_ms + 60_000, [], None
        for t in fires:
            try:
                rid = fire(client, d, t, missed=t == missed)
            except QueueError as exc:  # unknown queue, bad items: recorded, the schedule goes on
                log.warning("%s: periodic request %s due %d not submitted: %s", by or "upkeep", name, t, exc)
                state["error"] = str(exc)
                continue
            except RedisError:
                raise  # the claim lapses and the next claimer fires this due time
            except Exception as exc:  # a bug must not stop the worker, nor this schedule
                log.exception("%s: periodic request %s due %d", by or "upkeep", name, t)
                state["error"] = f"{type(exc).__name__}: {exc}"
                continue
            state.update(due=t, request=rid)
            fired.append((name, t, rid))
        record = json.dumps(state) if fires or state["error"] else ""  # skipped: the last run stays as it was
        client.store.periodic.periodic_done(name, token, nxt, record)
    return fired


def run_now(client, d: Definition) -> str:
    """Fire once now, apart from the schedule (which keeps its due times)."""
    now = server_ms(client)
    rid = fire(client, d, now, manual=True)
    state = last_runs(client, [d.name]).get(d.name) or {}
    client.redis.hset(client.keys.periodic.state, d.name,
                      json.dumps({**state, "at": now, "request": rid, "error": ""}))
    return rid


def repair(client) -> int:
    """Put back enabled schedules missing from `due` (see periodic_repair)."""
    pk = client.keys.periodic
    pipe = client.redis.pipeline(transaction=False)
    pipe.hkeys(pk.defs)
    pipe.zrange(pk.due, 0, -1)
    names, present = pipe.execute()
    missing = sorted(set(names) - set(present))  # names only: definitions may be large
    if not missing:
        return 0
    now, back = server_ms(client), []
    for name, raw in zip(missing, client.redis.hmget(pk.defs, missing)):
        if raw is None:
            continue  # removed meanwhile
        try:
            back.append((name, raw, Definition.from_json(raw).next_after(now)))
        except Exception as exc:
            log.warning("periodic request %s cannot be put back: %s", name, exc)
    return client.store.periodic.periodic_repair(back) if back else 0


# -- reading (the dashboard) ----------------------------------------------------


def last_runs(client, names: list[str]) -> dict[str, dict]:
    """name -> state of its last fire: due, at (ms), request, error."""
    if not names:
        return {}
    raw = client.redis.hmget(client.keys.periodic.state, names)
    return {n: json.loads(v) for n, v in zip(names, raw) if v}


def next_runs(client, names: list[str]) -> dict[str, int | None]:
    """name -> next due time (ms) as workers see it; None when not scheduled
    (paused, or never published)."""
    if not names:
        return {}
    pk = client.keys.periodic
    pipe = client.redis.pipeline(transaction=False)
    for n in names:
        pipe.zscore(pk.due, n)
    pipe.hmget(pk.claims, names)
    *scores, claims = pipe.execute()
    out = {}
    for n, score, claim in zip(names, scores, claims):
        out[n] = int(claim.partition("|")[0]) if claim else (int(score) if score is not None else None)
    return out
