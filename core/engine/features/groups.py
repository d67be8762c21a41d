"""Groups (tenants): a request may name a group; per queue and per group,
a concurrency limit across every request of the group, a rate limit, and
fair turns between groups at the same priority.

All of it is enforced where workers claim tokens (`lua/cycle-18.lua`), in
the same atomic step as the other limits, with three keys of the queue's
slot (docs/keys.md): `groups` (the last sequence given to each group's
tokens), `glimits` (a group's own limits) and `gheld` (the held tokens of
each group under a concurrency limit). A request's group travels in the queue's `reqs` hash (a fifth
field) and in its meta (`group`).

Fair turns are start-time fair queueing over the token order: a group's
new or returned token goes after the later of the group's last token and
the head of its priority band (`_common.lua` group_seqs), so a group with
1,000 waiting requests and a group with one take turns, and the requests
within a group take turns. Strict priority between bands is unchanged.
Tokens put back by other paths (a lease that ran out, parked tokens woken,
a priority change, a released worker's tokens) take the queue's plain
order, as ungrouped tokens do.

Limits: the queue's defaults (`group_concurrency`, 0 = none;
`group_rate_limit`, "" = none; QueueConfig) unless a group has its own
(`set_limits`: the engine call behind the admin's queue groups).
"""
from __future__ import annotations

from queueadmin.core.engine.config import MAX_CONCURRENCY
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features import ratelimit

MAX_GROUP_CHARS = 64
WAITING_READ = 10_000  # waiting tokens read for the dashboard's per-group counts


def check_group(group) -> str | None:
    """A checked group name (None or "" for none), or QueueError."""
    if group is None or group == "":
        return None
    if not isinstance(group, str):
        raise QueueError("the group must be text")
    if len(group) > MAX_GROUP_CHARS:
        raise QueueError(f"the group must be 1 to {MAX_GROUP_CHARS} characters")
    if "|" in group:
        raise QueueError("the group must not contain '|'")
    if any(ord(ch) < 32 or ord(ch) == 127 or 0xD800 <= ord(ch) <= 0xDFFF for ch in group):
        raise QueueError("the group must not contain control characters or line breaks")
    if group.strip() == "":
        raise QueueError("the group must not be blank")
    return group


def limits_value(concurrency: int | None, rate_limit: str | None) -> str:
    """The glimits value "concurrency|rate spec" (empty parts: the queue's default)."""
    if concurrency is not None:
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or \
                not 0 <= concurrency <= MAX_CONCURRENCY:
            raise QueueError(f"the group's concurrency must be an integer between 0 (no limit) and {MAX_CONCURRENCY}")
    try:
        rate = ratelimit.parse(rate_limit)
    except ratelimit.RateLimitError as exc:
        raise QueueError(str(exc)) from None
    # a group's own "no limit" is concurrency 0; rate "" always means the default
    return f"{'' if concurrency is None else concurrency}|{rate.spec if rate else ''}"


def set_limits(client, queue: str, group: str, concurrency: int | None = None, rate_limit: str | None = None) -> None:
    group = check_group(group)
    if not group:
        raise QueueError("a group is needed")
    value = limits_value(concurrency, rate_limit)
    qk = client.keys.queue(queue)
    pipe = client.redis.pipeline(transaction=False)
    if value == "|":
        pipe.hdel(qk.glimits, group)
    else:
        pipe.hset(qk.glimits, group, value)
    if not value.endswith("|"):  # some group has a rate limit: workers keep no token (runtime/keeping.py)
        pipe.hset(qk.config, "group_rates", 1)
    pipe.rpush(qk.wake, 1)  # a raised limit may free waiting tokens
    pipe.execute()


def clear_limits(client, queue: str, group: str) -> None:
    qk = client.keys.queue(queue)
    pipe = client.redis.pipeline(transaction=False)
    pipe.hdel(qk.glimits, group)
    pipe.rpush(qk.wake, 1)
    pipe.execute()


def _own(value: str) -> tuple[int | None, str]:
    conc, _, spec = (value or "").partition("|")
    return (int(conc) if conc.isdigit() else None), spec


def _rate_text(spec: str) -> str:
    n, _, rest = (spec or "").partition("|")
    window = rest.partition("|")[0]
    return ratelimit.Rate(int(n), int(window)).text if n.isdigit() and window.isdigit() else ""


def stats(client, queue: str) -> list[dict]:
    """One dict per group seen in the queue (with limits of its own, held
    tokens or waiting tokens among the first WAITING_READ): group,
    in_flight (its held tokens), concurrency (0: none), rate_limit ("" none),
    rate_used, waiting, waiting_capped, throttled. One round trip, plus one
    to read the held and waiting tokens' requests."""
    qk = client.keys.queue(queue)
    pipe = client.redis.pipeline(transaction=False)
    pipe.hmget(qk.config, "group_concurrency", "group_rate_spec")
    pipe.hgetall(qk.glimits)
    pipe.hkeys(qk.held)
    pipe.zrange(qk.tokens, 0, WAITING_READ - 1)
    pipe.zcard(qk.tokens)
    pipe.hgetall(qk.rate)
    ratelimit.pipe_stale(pipe, client.keys, queue)
    (dconc, dspec), own, held, waiting_tokens, n_tokens, rate_hash, stale = pipe.execute()
    rids = list({t.rpartition("#")[0] for t in [*held, *waiting_tokens]})
    reqs = dict(zip(rids, client.redis.hmget(qk.reqs, rids))) if rids else {}

    def count(tokens) -> dict[str, int]:
        out: dict[str, int] = {}
        for token in tokens:
            v = reqs.get(token.rpartition("#")[0])
            parts = v.split("|", 4) if v else []
            if len(parts) == 5:
                out[parts[4]] = out.get(parts[4], 0) + 1
        return out

    in_flight, waiting = count(held), count(waiting_tokens)
    capped = n_tokens > len(waiting_tokens)
    counts = ratelimit._less_stale({k[2:]: int(v) for k, v in rate_hash.items() if k.startswith("n:g:")}, stale)
    out = []
    for g in sorted(set(own) | set(in_flight) | set(waiting)):
        conc, spec = _own(own.get(g, ""))
        if conc is None:
            conc = int(dconc) if (dconc or "").isdigit() else 0
        spec = spec or dspec or ""
        rate_text = _rate_text(spec)
        used = counts.get(f"g:{g}", 0)
        rate_count = int(spec.partition("|")[0]) if rate_text else 0
        n = in_flight.get(g, 0)
        out.append({"group": g, "in_flight": n, "concurrency": conc, "rate_limit": rate_text, "rate_used": used,
                    "waiting": waiting.get(g, 0), "waiting_capped": capped, "own_limits": g in own,
                    "throttled": bool((conc and n >= conc) or (rate_text and used >= rate_count))})
    return out
