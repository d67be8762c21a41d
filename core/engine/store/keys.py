"""Every Redis key the engine uses, in one place.

Keys carry a hash tag so that each Lua script touches one cluster slot:

* ``{q:NAME}`` — a queue's dispatch structures: waiting tokens, held tokens,
  their leases, parked tokens, active requests, the schedule, de-dup index,
  wake list and configuration. Every worker serving the queue polls these.
* ``{r:ID}`` — one request: its meta hash, item stream, item leases, results
  and dead letters. A one-item request submitted without a fixed id is made
  in its queue's slot instead (``ID-TAG``, TAG a short string of the
  queue's slot, `slot_tag`): one script creates and registers it, and a
  worker takes and acknowledges many of them in one call each
  (take_lean, ack_lean).
* ``{periodic}`` — periodic requests: definitions, due times, claims and
  state (core/engine/periodic.py).

Global keys (no tag) are only ever used by single-key commands.
"""
import itertools
import re
import string
from binascii import crc_hqx
from dataclasses import dataclass
from functools import lru_cache

# Token scores: (99 - priority) * PRIORITY_BAND + sequence, so ZPOPMIN serves
# the highest priority first and, within a priority, the token returned first.
PRIORITY_BAND = 2**44
MAX_PRIORITY = 99
GROUP = "g"  # the consumer group of every request stream
SLOTS = 16384
TAG_CHARS = string.digits + string.ascii_letters
IN_QUEUE_SLOT = re.compile(r"^[0-9a-f]{17}-([0-9A-Za-z]{1,4})$")  # a one-item request id in its queue's slot


def slot(tag: str) -> int:
    """The cluster slot of a hash tag (CRC16/XMODEM, as Redis computes it)."""
    return crc_hqx(tag.encode(), 0) % SLOTS


@lru_cache(maxsize=4096)
def slot_tag(queue: str) -> str:
    """The shortest string (first in TAG_CHARS order) whose slot is that of
    the queue's tag `q:NAME`: request ids carry it, so their keys are in the
    queue's slot. About 16,000 CRCs once per queue and process (milliseconds)."""
    target = slot(f"q:{queue}")
    for length in range(1, 5):
        for chars in itertools.product(TAG_CHARS, repeat=length):
            tag = "".join(chars)
            if slot(tag) == target:
                return tag
    raise AssertionError("every slot has a tag of at most 4 characters")  # 62**3 tags cover 16384 slots


@dataclass(frozen=True)
class QueueKeys:
    prefix: str
    name: str

    def _k(self, suffix: str) -> str:
        return f"{self.prefix}:{{q:{self.name}}}:{suffix}"

    @property
    def tokens(self) -> str:  # ZSET token -> score (priority band + seq)
        return self._k("tokens")

    @property
    def seq(self) -> str:  # STRING counter for token order
        return self._k("seq")

    @property
    def held(self) -> str:  # HASH token -> worker id
        return self._k("held")

    @property
    def leases(self) -> str:  # ZSET token -> lease deadline (ms)
        return self._k("leases")

    @property
    def parked(self) -> str:  # ZSET token -> wake time (ms); far future = until new items
        return self._k("parked")

    @property
    def reqs(self) -> str:  # HASH request id -> "priority|concurrency|max_token|state[|group]"
        return self._k("reqs")

    @property
    def sched(self) -> str:  # ZSET request id -> ready time (ms), the near-term schedule
        return self._k("sched")

    def sched_shard(self, k: int) -> str:  # ZSET request id -> ready time (ms), far-off, own slot (schedule.py)
        return f"{self.prefix}:{{qs:{self.name}:{k}}}:sched"

    @property
    def dedup(self) -> str:  # HASH de-dup key -> request id
        return self._k("dedup")

    @property
    def wake(self) -> str:  # LIST of wake markers that idle workers block on
        return self._k("wake")

    @property
    def idle(self) -> str:  # ZSET worker id -> when its rest ends (ms): idle workers, for handoffs (handoff.py)
        return self._k("idle")

    @property
    def config(self) -> str:  # HASH queue settings (priority, lease, paused, ...)
        return self._k("config")

    @property
    def index(self) -> str:  # ZSET request id -> created (ms), every live request but those waiting packed
        return self._k("index")

    @property
    def packed(self) -> str:  # HASH priority -> one-item requests waiting packed in its band (store/packed.py)
        return self._k("packed")

    @property
    def lane(self) -> str:  # LIST "seq|id" of one-item requests waiting in the lane (store/packed.py)
        return self._k("lane")

    @property
    def tomb(self) -> str:  # SET ids of lane requests that wait no more (until the claim reaches them)
        return self._k("tomb")

    @property
    def lastserved(self) -> str:  # HASH request id -> last claim (ms), for aging
        return self._k("lastserved")

    @property
    def rate(self) -> str:  # HASH "lim:<rid>" -> a request's rate spec; "n:<limiter>" -> starts in its window
        return self._k("rate")

    @property
    def ratelog(self) -> str:  # ZSET "<limiter>|<n>" -> when that start stops counting (ms); ratelimit.py
        return self._k("ratelog")

    # Groups (tenants; features/groups.py)
    @property
    def groups(self) -> str:  # HASH "s:<group>" -> the last sequence given to the group's tokens
        return self._k("groups")

    @property
    def glimits(self) -> str:  # HASH group -> "concurrency|rate spec" (empty parts: the queue's defaults)
        return self._k("glimits")

    @property
    def gheld(self) -> str:  # ZSET group + "\x1f" + token (score 0): the held tokens of each group
        return self._k("gheld")

    # What workers can run (core/engine/routing.py)
    @property
    def needs(self) -> str:  # HASH request id -> "since_ms|processor": a worker lacked its processor
        return self._k("needs")

    @property
    def orphans(self) -> str:  # HASH processor -> since when no live worker of the queue can run it (ms)
        return self._k("orphans")

    @property
    def can(self) -> str:  # HASH worker id -> the processors it can run, each between newlines (handoffs)
        return self._k("can")

    @property
    def reviewed(self) -> str:  # STRING the worker reviewing needs and orphans this second (expires)
        return self._k("reviewed")

    def all_dispatch(self) -> list[str]:
        """The keys of the queue's slot (all but the schedule shards)."""
        return [self.tokens, self.seq, self.held, self.leases, self.parked, self.reqs, self.sched, self.dedup,
                self.wake, self.idle, self.config, self.index, self.packed, self.lastserved, self.rate, self.ratelog,
                self.needs, self.orphans, self.can, self.reviewed, self.groups, self.glimits, self.gheld,
                self.lane, self.tomb]


@dataclass(frozen=True)
class RequestKeys:
    prefix: str
    rid: str
    tag: str  # r:ID, or for a request in its queue's slot the queue's slot tag (see slot_tag)

    def _k(self, suffix: str) -> str:
        if self.tag.startswith("r:"):  # its own slot: the tag is the id
            return f"{self.prefix}:{{{self.tag}}}:{suffix}"
        return f"{self.prefix}:{{{self.tag}}}:{self.rid}:{suffix}"  # its queue's slot

    @property
    def meta(self) -> str:  # HASH state, counters, timings, settings
        return self._k("meta")

    @property
    def items(self) -> str:  # STREAM entries {i: index, p: payload json}
        return self._k("items")

    @property
    def leases(self) -> str:  # ZSET entry id -> lease deadline / retry time (ms)
        return self._k("leases")

    @property
    def results(self) -> str:  # HASH index -> result record json; a:<index> -> its attempts (attempts.py)
        return self._k("results")

    @property
    def dead(self) -> str:  # ZSET entry id -> dead-lettered at (ms)
        return self._k("dead")

    def all(self) -> list[str]:  # meta, items, leases, results, dead: the order every request script takes
        base = self._k("")
        return [base + "meta", base + "items", base + "leases", base + "results", base + "dead"]


@dataclass(frozen=True)
class PeriodicKeys:
    prefix: str

    def _k(self, suffix: str) -> str:
        return f"{self.prefix}:{{periodic}}:{suffix}"

    @property
    def defs(self) -> str:  # HASH name -> definition JSON (enabled schedules only)
        return self._k("defs")

    @property
    def due(self) -> str:  # ZSET name -> next due time (ms), or claim deadline while claimed
        return self._k("due")

    @property
    def claims(self) -> str:  # HASH name -> "due_ms|token" of the claim being fired
        return self._k("claims")

    @property
    def state(self) -> str:  # HASH name -> JSON: last due, last run, last request id, next run, error
        return self._k("state")

    @property
    def secret(self) -> str:  # STRING random bytes (hex) that fires' request ids are keyed with (periodic.py)
        return self._k("secret")


class Keys:
    """Key factory bound to one prefix."""

    def __init__(self, prefix: str = "qa"):
        self.prefix = prefix

    def queue(self, name: str) -> QueueKeys:
        return QueueKeys(self.prefix, name)

    def request(self, rid: str) -> RequestKeys:
        m = IN_QUEUE_SLOT.match(rid)
        return RequestKeys(self.prefix, rid, m[1] if m else f"r:{rid}")

    def meta_patterns(self, queue: str) -> tuple[str, str]:
        """SORT GET patterns (`*` = a request id) of the meta hashes of a
        queue's requests: in their own slot, and one-item ones in the queue's."""
        return f"{self.prefix}:{{r:*}}:meta", f"{self.prefix}:{{{slot_tag(queue)}}}:*:meta"

    @staticmethod
    def in_queue_slot(rid: str) -> bool:
        """A one-item request made in its queue's slot (see slot_tag)."""
        return IN_QUEUE_SLOT.match(rid) is not None

    @property
    def periodic(self) -> PeriodicKeys:
        return PeriodicKeys(self.prefix)

    @property
    def queues(self) -> str:  # SET of queue names
        return f"{self.prefix}:queues"

    @property
    def workers(self) -> str:  # ZSET worker id -> last heartbeat (ms)
        return f"{self.prefix}:workers"

    def worker(self, wid: str) -> str:  # HASH host, pid, started, queues, current, counts
        return f"{self.prefix}:worker:{wid}"

    def worker_control(self, wid: str) -> str:  # STRING "quiet" or "stop": asked of a worker, read by its heartbeat
        # not under `worker:`, whose keys the workers page finds by SCAN as hashes
        return f"{self.prefix}:control:{wid}"

    def events(self, rid: str) -> str:  # pub/sub channel for one request
        return f"{self.prefix}:events:{rid}"

    @property
    def events_all(self) -> str:  # pub/sub channel with every request's events
        return f"{self.prefix}:events"

    @property
    def chains(self) -> str:  # ZSET request id with a `then` -> registered/last looked at (ms), until followed
        return f"{self.prefix}:chains"

    @property
    def stops(self) -> str:  # ZSET "rid" (cancelled) or "rid entry" (one item) -> asked at (ms)
        return f"{self.prefix}:stops"

    def throughput(self, queue: str, minute: int) -> str:  # HASH done/failed per minute
        return f"{self.prefix}:tp:{queue}:{minute}"

    def stats(self, queue: str) -> str:  # HASH item counters and histogram buckets, never expire (stats.py)
        return f"{self.prefix}:stats:{queue}"

    # The metrics history (features/history.py): a series is "q:<queue>" or "p:<processor>"; its keys share
    # the tag {h:<series>}, so the one script that writes them (history_add) touches one slot.
    def history_minutes(self, series: str, hour: int) -> str:  # HASH minute of the hour -> point (expires)
        return f"{self.prefix}:{{h:{series}}}:m:{hour}"

    def history_hours(self, series: str, day: int) -> str:  # HASH hour of the day -> point (expires)
        return f"{self.prefix}:{{h:{series}}}:h:{day}"

    def api_rate(self, token: str, window: int) -> str:  # STRING an API token's calls in one window (expires)
        return f"{self.prefix}:rate:{token}:{window}"

    # Bulk jobs by filter (client/bulk.py): single-key commands only, so no hash tag.
    @property
    def bulk_jobs(self) -> str:  # ZSET bulk job id -> created (ms), the recent ones
        return f"{self.prefix}:bulk"

    def bulk_job(self, jid: str) -> str:  # HASH kind, action, filter, state, counts, cursor (expires when done)
        return f"{self.prefix}:bulk:{jid}"

    def bulk_targets(self, jid: str) -> str:  # LIST the job's targets (request ids, or "rid:entry" pairs)
        return f"{self.prefix}:bulk:{jid}:targets"

    def bulk_runner(self, jid: str) -> str:  # STRING who runs the job now (expires: a lapsed runner is resumed)
        return f"{self.prefix}:bulk:{jid}:runner"

    # Webhook deliveries (webhook_store.py): all in one slot, {wh}, so one script sees them together.
    @property
    def webhooks_due(self) -> str:  # ZSET delivery id -> next attempt (ms), or claim deadline while sending
        return f"{self.prefix}:{{wh}}:due"

    def webhook(self, did: str) -> str:  # HASH one delivery: request, url, signer, body, state, attempts, a:N
        return f"{self.prefix}:{{wh}}:d:{did}"

    def webhooks_of(self, rid: str) -> str:  # ZSET a request's delivery ids -> created (ms)
        return f"{self.prefix}:{{wh}}:r:{rid}"

    @property
    def webhooks_watch(self) -> str:  # ZSET request id (with a callback) -> next look at its state (ms)
        return f"{self.prefix}:{{wh}}:watch"

    @property
    def webhook_targets(self) -> str:  # ZSET target id -> when it may be taken next (ms), see webhook_store
        return f"{self.prefix}:{{wh}}:targets"

    @property
    def webhook_targets_slow(self) -> str:  # ZSET the same, for targets whose last attempt timed out
        return f"{self.prefix}:{{wh}}:slow"

    def webhook_target(self, tid: str) -> str:  # HASH one target: name, claim, timeouts, until
        return f"{self.prefix}:{{wh}}:t:{tid}"

    def webhook_target_queue(self, tid: str) -> str:  # ZSET a target's deliveries -> next attempt, or claim (ms)
        return f"{self.prefix}:{{wh}}:q:{tid}"
