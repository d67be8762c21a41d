"""Webhook deliveries in Redis: durable, claimed atomically, attempts kept,
fair between targets.

A request that carries a `callback_url` (in its meta hash, with the signer
that signs it) gets one delivery when it finishes (completed, failed,
cancelled or expired): a hash holding the request, the URL, the signer, the
exact body to POST and a log of attempts (`a:1`, `a:2`, ...).
It is made when the request is cancelled (`on_cancelled`, on the engine's
CANCELLED event: events.py), when a worker process run through Django sees it
finish (core/webhooks/deliveries.py, on FINISHED), and otherwise by `sweep`,
which looks at watched requests now and then.

Deliveries wait in their TARGET's queue (a target is the receiver's
host:port): senders (core/webhooks/sender.py, threads of each worker process)
take a due target with one script (`webhook_take`), which claims its
earliest due delivery, so a target is sent one delivery at a time by all
senders together and two senders never send the same attempt; they record
each attempt with a script that checks the claim still holds
(`webhook_sent`). A target whose attempts time out waits a penalty that
doubles with each (up to WEBHOOK_BACKOFF_MAX_SECONDS) and moves to a slow
set, which senders serve with fewer threads: slow receivers delay only
themselves. All keys share the `{wh}` slot (keys.py). No Django here: the
HTTP side, signing secrets and the target policy live in core/webhooks/.

Older versions kept one due set of deliveries (`webhook_add`,
`webhook_claim`, `webhook_done`, kept for them); `adopt` moves what they
left into target queues.
"""
from __future__ import annotations

import hashlib
import json
import time
from urllib.parse import urlsplit

from queueadmin.core.engine.states import TERMINAL

KEEP_MS = 7 * 86400 * 1000  # a closed delivery's record stays this long (the request page shows it)
GIVE_UP_MS = 86400 * 1000  # retries stop this long after the delivery was created
LOG_MAX = 50  # attempts kept per delivery (the newest)
WATCH_MS = 30_000  # how often a watched request's state is looked at
SUMMARY = ("id", "queue", "processor", "state", "total", "done", "failed", "expired", "dead",
           "created_at", "started_at", "finished_at")


def delivery_id(status: dict) -> str:
    """The request and its finish time: one delivery per finish (a request
    reopened by a retry of its dead letters and finished again gets another)."""
    finished = status.get("finished_at") or 0
    return f"{status['id']}-{int(round(finished * 1000))}"


def body(status: dict, did: str) -> str:
    """The JSON posted, fixed when the delivery is made (its signature covers
    these exact bytes, on every attempt)."""
    summary = {f: status.get(f) for f in SUMMARY}
    return json.dumps({"event": "request.finished", "delivery": did, **summary}, separators=(",", ":"),
                      ensure_ascii=False)


def target_of(url: str) -> tuple[str, str]:
    """(id, name) of the target a URL is sent to: its host and port ("" for
    a URL that does not parse: the attempt refuses it)."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".").lower()
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        name = f"{host}:{port}" if host else ""
    except ValueError:
        name = ""
    return hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:20], name


def enqueue(client, status: dict | None) -> str | None:
    """Make the delivery of a finished request with a callback URL; returns its
    id (None when there is nothing to send). Idempotent."""
    if not status or not status.get("callback_url") or status.get("state") not in TERMINAL:
        return None
    did = delivery_id(status)
    tid, name = target_of(status["callback_url"])
    fields = ["request", status["id"], "url", status["callback_url"], "signer", status.get("callback_signer", ""),
              "body", body(status, did)]
    client.store.webhooks.webhook_queue(did, status["id"], tid, name, GIVE_UP_MS + KEEP_MS, fields)
    return did


def on_cancelled(cancelled) -> None:
    """events.CANCELLED: a cancelled request that asked for a webhook gets its delivery."""
    if cancelled.meta.get("callback_url"):
        enqueue(cancelled.client, cancelled.status)


def watch(client, rid: str) -> None:
    """Look at a request with a callback now and then until it finished: its
    delivery is made even if the worker that finished it died before its
    reporter recorded the finish (which makes it at once otherwise)."""
    client.redis.zadd(client.keys.webhooks_watch, {rid: int(time.time() * 1000) + WATCH_MS})


def sweep(client, batch: int = 200) -> int:
    """Make the deliveries of watched requests that finished; returns how many
    requests were looked at. Idempotent, so senders may sweep together."""
    k, now = client.keys, int(time.time() * 1000)
    rids = client.redis.zrangebyscore(k.webhooks_watch, "-inf", now, start=0, num=batch)
    if not rids:
        return 0
    pipe = client.redis.pipeline(transaction=False)
    for rid, status in zip(rids, client.statuses(rids)):
        if status is None or status.get("state") in TERMINAL:
            enqueue(client, status)
            pipe.zrem(k.webhooks_watch, rid)
        else:  # a delayed request is looked at again when it may start
            later = max(now + WATCH_MS, int((status.get("not_before") or 0) * 1000))
            pipe.zadd(k.webhooks_watch, {rid: later}, xx=True)
    pipe.execute()
    return len(rids)


def load(client, did: str) -> dict | None:
    raw = client.redis.hgetall(client.keys.webhook(did))
    return raw or None


def due_targets(client, slow: bool, count: int) -> list[str]:
    """Up to `count` targets due now, longest waiting first (the normal set,
    or the set of targets whose last attempt timed out)."""
    if count <= 0:
        return []
    k = client.keys
    key = k.webhook_targets_slow if slow else k.webhook_targets
    return client.redis.zrangebyscore(key, "-inf", int(time.time() * 1000), start=0, num=count)


def take(client, tid: str, lease_ms: int) -> tuple[int, str] | None:
    """Claim a due target's earliest due delivery until the returned deadline
    (ms); None when another sender took it first or nothing of it is due."""
    return client.store.webhooks.webhook_take(tid, lease_ms)


def sent(client, did: str, tid: str, rid: str, deadline: int, attempt: dict, state: str, next_at_ms: int = 0,
         news: str = "none", penalty_ms: tuple[int, int] = (10_000, 3_600_000), keep_ms: int = KEEP_MS) -> int:
    """Log an attempt of a delivery taken with `take`, schedule the next
    (state "pending") or close it, and place its target again; `news` is
    what the attempt says of the target: "timeout" (a penalty doubling from
    penalty_ms[0] up to penalty_ms[1]), "answered" (none) or "none". 0 when
    the claim ran out and another sender holds the delivery."""
    return client.store.webhooks.webhook_sent(did, rid, tid, deadline=deadline, attempt=_json(attempt), state=state,
                                              next_at_ms=int(next_at_ms), keep_ms=keep_ms, log_max=LOG_MAX, news=news,
                                              penalty_ms=(int(penalty_ms[0]), int(penalty_ms[1])))


def adopt(client, batch: int = 100) -> int:
    """Move deliveries an older version left in its single due set into their
    targets' queues; returns how many were moved."""
    k = client.keys
    ids = client.redis.zrangebyscore(k.webhooks_due, "-inf", int(time.time() * 1000), start=0, num=batch)
    moved = 0
    for did in ids:
        tid, name = target_of(client.redis.hget(k.webhook(did), "url") or "")
        moved += client.store.webhooks.webhook_adopt(did, tid, name, GIVE_UP_MS + KEEP_MS)
    return moved


# -- the single due set of older versions (kept for senders still running them)


def claim(client, lease_ms: int, count: int) -> tuple[int, list[str]]:
    """Due deliveries of the older due set, now this caller's until the
    returned deadline (ms)."""
    return client.store.webhooks.webhook_claim(lease_ms, count)


def record(client, did: str, rid: str, deadline: int, attempt: dict, state: str, next_at_ms: int = 0,
           keep_ms: int = KEEP_MS) -> int:
    """Log an attempt of a delivery claimed from the older due set."""
    return client.store.webhooks.webhook_done(did, rid, deadline=deadline, attempt=_json(attempt), state=state,
                                              next_at_ms=int(next_at_ms), keep_ms=keep_ms, log_max=LOG_MAX)


def _json(attempt: dict) -> str:
    return json.dumps(attempt, separators=(",", ":"))


def backoff_ms(attempts: int, first_s: float, most_s: float) -> int:
    """Wait before attempt `attempts + 1`: first_s, doubling, at most most_s."""
    return int(min(most_s, first_s * 2 ** max(0, attempts - 1)) * 1000)


def next_attempt(delivery: dict, attempts: int, first_s: float, most_s: float, give_up_ms: int = GIVE_UP_MS,
                 now_ms: int | None = None) -> int | None:
    """When to try again after `attempts` failed attempts, or None: give up
    (the next try would come after the delivery's day is over)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    at = now_ms + backoff_ms(attempts, first_s, most_s)
    return at if at <= int(delivery.get("created", now_ms)) + give_up_ms else None


def of_request(client, rid: str) -> list[dict]:
    """A request's deliveries, oldest first, each with its attempts in order."""
    k = client.keys
    ids = client.redis.zrange(k.webhooks_of(rid), 0, -1)
    if not ids:
        return []
    pipe = client.redis.pipeline(transaction=False)
    for did in ids:
        pipe.hgetall(k.webhook(did))
    out = []
    for did, raw in zip(ids, pipe.execute()):
        if raw:
            out.append(parse(did, raw))
    return out


def parse(did: str, raw: dict) -> dict:
    attempts = sorted((int(f[2:]), json.loads(v)) for f, v in raw.items() if f.startswith("a:"))
    return {"id": did, "request": raw.get("request", ""), "url": raw.get("url", ""),
            "state": raw.get("state", ""), "attempts": int(raw.get("attempts", 0) or 0),
            "created": int(raw.get("created", 0) or 0) / 1000,
            "next_at": int(raw["next_at"]) / 1000 if raw.get("next_at") else None,
            "log": [{"n": n, **a} for n, a in attempts]}
