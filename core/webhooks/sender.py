"""Sending webhook deliveries: a dispatcher thread in each worker process
(started with Django's side of the worker, core/launch.py) takes due targets
from Redis (core/engine/features/webhook_store.py: one delivery at a time per target,
over all senders), and runs each attempt in a thread of its own: it checks
the target again, POSTs the body signed, and records the attempt: delivered
(2xx), tried again with exponential backoff (any other answer, a timeout, a
refused connection) for up to a day, or closed (refused by the target
policy, or the signing token deleted).

Fair and bounded: an attempt, name lookup included, ends within
WEBHOOK_TIMEOUT_SECONDS whatever the receiver does (answers nothing,
trickles bytes, reads the body slowly). A process runs at most
WEBHOOK_SENDERS attempts for targets in good standing and as many again for
slow ones: an attempt still unanswered after `SLOW_AFTER` leaves its place
to others, and targets whose last attempt timed out (webhook_store's slow
set, with a penalty that doubles per timeout) get only the slow places. So
receivers that never answer delay one another, not the others.

The connection goes to an address `policy.check_target` has just
checked, with the URL's host name in `Host` and in TLS (SNI and certificate
check), so a name that resolves to a public address at the check and to a
private one a moment later (DNS rebinding) reaches nothing new. Redirects are
not followed; proxies from the environment are not used.
"""
from __future__ import annotations

import http.client
import logging
import socket
import threading
import time
from dataclasses import dataclass

import redis
from django.db import DatabaseError, connection

from queueadmin.core import clients, conf
from queueadmin.core.background import OnePerProcess
from queueadmin.core.webhooks import policy as webhooks
from queueadmin.core.engine.features import webhook_store

log = logging.getLogger("queueadmin.webhooks")

SLOW_AFTER = 1.0  # seconds: an attempt unanswered this long moves to a slow place (if one is free)
LEASE_MARGIN_MS = 60_000  # a claim lasts the attempt's deadline plus this (a slow database, a busy machine)
_wake = threading.Event()
_dispatcher = OnePerProcess("webhooks", lambda: Sender().run)  # Sender: below


def wake() -> None:
    """A delivery was made, or an attempt ended, in this process: look now,
    not at the next poll."""
    _wake.set()


def start() -> threading.Thread:
    """Start this process's dispatcher thread once."""
    return _dispatcher.start()


@dataclass
class Running:
    started: float
    slow: bool  # holds a slow place


class Sender:
    def __init__(self, client=None):
        self.client = client or clients.engine()
        self.timeout = float(conf.get("WEBHOOK_TIMEOUT_SECONDS"))
        self.first = float(conf.get("WEBHOOK_BACKOFF_SECONDS"))
        self.most = float(conf.get("WEBHOOK_BACKOFF_MAX_SECONDS"))
        self.give_up_ms = int(float(conf.get("WEBHOOK_GIVE_UP_SECONDS")) * 1000)
        self.poll = float(conf.get("WEBHOOK_POLL_SECONDS"))
        self.places = max(1, int(conf.get("WEBHOOK_SENDERS")))
        self.lease_ms = int(self.timeout * 1000) + LEASE_MARGIN_MS
        self.lock = threading.Lock()
        self.running: dict[str, Running] = {}  # delivery id -> its attempt under way
        self.swept = float("-inf")

    def run(self, stop: threading.Event | None = None) -> None:
        delay = self.poll
        while stop is None or not stop.is_set():
            _wake.clear()
            try:
                started = self.dispatch(sweep=time.monotonic() - self.swept >= self.poll)
                delay = self.poll
            except redis.RedisError as exc:  # ridden out like the worker does
                started, delay = [], min(30.0, delay * 2)
                log.warning("webhooks: %s; retrying in %.0fs", exc, delay)
            except Exception:
                started, delay = [], min(30.0, delay * 2)
                log.exception("webhooks: sending failed")
            if not started:
                _wake.wait(min(delay, SLOW_AFTER) if self.running else delay)

    def deliver_due(self) -> int:
        """Send what is due now and wait for those attempts; returns how many
        were tried (for tests and one-off use)."""
        threads = self.dispatch(sweep=True)
        for thread in threads:
            thread.join()
        return len(threads)

    # -- places ---------------------------------------------------------------------

    def free(self) -> tuple[int, int]:
        """(places for any target, places for slow targets only) free now. An
        attempt unanswered after SLOW_AFTER moves to a slow place if one is
        free, so that receivers that hold on do not hold up the others."""
        now = time.monotonic()
        with self.lock:
            slow = sum(r.slow for r in self.running.values())
            for r in self.running.values():
                if not r.slow and slow < self.places and now - r.started >= SLOW_AFTER:
                    r.slow, slow = True, slow + 1
            return self.places - (len(self.running) - slow), self.places - slow

    def dispatch(self, sweep: bool = False) -> list[threading.Thread]:
        """Start attempts for the targets due, as far as places allow."""
        if sweep:
            webhook_store.sweep(self.client)
            webhook_store.adopt(self.client)
            self.swept = time.monotonic()
        fast, slow = self.free()
        threads = []
        for tid in webhook_store.due_targets(self.client, True, slow):
            thread = self.begin(tid, slow=True)
            if thread is not None:
                threads.append(thread)
                slow -= 1
        for tid in webhook_store.due_targets(self.client, False, fast + slow):
            thread = self.begin(tid, slow=fast <= 0)
            if thread is not None:
                threads.append(thread)
                fast, slow = (fast - 1, slow) if fast > 0 else (fast, slow - 1)
        return threads

    def begin(self, tid: str, slow: bool) -> threading.Thread | None:
        """Take the target's next delivery and start its attempt in a thread
        (the database is read here, in this thread, not in the attempts')."""
        got = webhook_store.take(self.client, tid, self.lease_ms)
        if got is None:
            return None
        deadline, did = got
        delivery = webhook_store.load(self.client, did)
        rid = (delivery or {}).get("request") or did.rpartition("-")[0]
        if delivery is None:  # expired meanwhile: the script drops it from the queue
            webhook_store.sent(self.client, did, tid, rid, deadline, {}, "failed")
            return None
        secret, problem = self.secret(delivery)
        attempts = int(delivery.get("attempts", 0) or 0)
        if problem is not None:
            self.record(did, tid, rid, deadline, delivery, attempts, *problem, "none")
            return None
        with self.lock:
            self.running[did] = Running(time.monotonic(), slow)
        thread = threading.Thread(target=self._attempt, args=(did, tid, rid, deadline, delivery, attempts, secret),
                                  name="webhook-attempt", daemon=True)
        thread.start()
        return thread

    def secret(self, delivery: dict) -> tuple[str | None, tuple[dict, str] | None]:
        """(the signing secret, None), or (None, (attempt record, state)) when
        there is none to sign with now."""
        started = time.time()
        try:
            secret = webhooks.signer_secret(delivery.get("signer", ""))
        except DatabaseError as exc:  # down, or a connection it dropped: a fresh one next time
            connection.close()
            return None, ({"at": started, "error": f"database unavailable ({type(exc).__name__})"}, "pending")
        if secret is None:
            return None, ({"at": started, "error": "the API token that submitted the request is gone: "
                                                   "nothing to sign with"}, "failed")
        return secret, None

    # -- one attempt, in its own thread ------------------------------------------------

    def _attempt(self, did, tid, rid, deadline, delivery, attempts, secret) -> None:
        try:
            attempt, state, news = self.attempt(did, delivery, attempts + 1, secret)
            self.record(did, tid, rid, deadline, delivery, attempts, attempt, state, news)
        except Exception:
            log.exception("webhook %s: the attempt failed", did)
        finally:
            with self.lock:
                self.running.pop(did, None)
            wake()

    def record(self, did, tid, rid, deadline, delivery, attempts, attempt, state, news) -> None:
        if state == "pending":
            next_at = webhook_store.next_attempt(delivery, attempts + 1, self.first, self.most, self.give_up_ms)
            state = "pending" if next_at is not None else "failed"
        else:
            next_at = None
        webhook_store.sent(self.client, did, tid, rid, deadline, attempt, state, next_at or 0, news,
                           (int(self.first * 1000), int(self.most * 1000)))
        log.info("webhook %s attempt %d to %s: %s", did, attempts + 1, delivery.get("url", "")[:200],
                 attempt.get("status") or attempt.get("error"))

    def attempt(self, did: str, delivery: dict, n: int, secret: str) -> tuple[dict, str, str]:
        """One attempt, ended within the timeout: (its record, the state after
        it: delivered, pending (try again) or refused, what it says of the
        target: timeout, answered or none)."""
        started, until = time.time(), time.monotonic() + self.timeout
        try:
            target = within(self.timeout, webhooks.check_target, delivery.get("url", ""))
        except TimeoutError:
            return {"at": started, "error": "timed out (name lookup)"}, "pending", "timeout"
        except webhooks.Unresolved as exc:
            return {"at": started, "error": str(exc)}, "pending", "answered"
        except webhooks.Refused as exc:
            return {"at": started, "error": f"refused: {exc}"}, "refused", "none"
        body = delivery.get("body", "").encode()
        headers = {"Content-Type": "application/json", "User-Agent": "queueadmin-webhooks/1",
                   "X-Queueadmin-Delivery": did, "X-Queueadmin-Attempt": str(n),
                   "X-Queueadmin-Timestamp": str(int(started)),
                   webhooks.SIGNATURE_HEADER: webhooks.sign(secret, body)}
        status, error, address = post(target, body, headers, until)
        record = {"at": started, "ms": int((time.time() - started) * 1000), "address": address}
        if status is not None:
            record["status"] = status
        if error:
            record["error"] = error
        state = "delivered" if status is not None and 200 <= status < 300 else "pending"
        return record, state, "timeout" if status is None and error.startswith("timed out") else "answered"


def within(seconds: float, fn, *args):
    """fn(*args), or TimeoutError after `seconds` (name lookups cannot be
    interrupted: one that hangs is left to finish in its own thread)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name="webhook-lookup", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError
    if "error" in box:
        raise box["error"]
    return box["value"]


# -- HTTP to a checked address ---------------------------------------------------------


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host, port, address, timeout):
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self):
        self.sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host, port, address, timeout):
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self):
        sock = self.sock = socket.create_connection((self.address, self.port), self.timeout)  # the deadline cuts the handshake too
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def post(target: webhooks.Target, body: bytes, headers: dict, until: float) -> tuple[int | None, str, str]:
    """(status or None, error, address used). The next address is tried only
    when a connection could not be made (nothing was sent). Everything,
    connecting to each address, sending, and the answer's status line and
    headers, must be done by `until` (monotonic): a receiver that trickles
    bytes or reads slowly cannot hold the sender. The answer's body is not read."""
    cls = _PinnedHTTPS if target.scheme == "https" else _PinnedHTTP
    error, address = "no address", ""
    for address in target.addresses:
        left = until - time.monotonic()
        if left <= 0:
            error = "timed out"
            break
        conn = cls(target.host, target.port, address, left)
        guard = _Deadline(conn, left)
        try:
            conn.request("POST", target.path, body=body, headers=headers)
            response = conn.getresponse()
            if guard.hit:  # cut short: what was read is not the answer
                raise TimeoutError
            error = "redirect not followed" if 300 <= response.status < 400 else ""
            return response.status, error, address
        except (OSError, http.client.HTTPException) as exc:
            error = "timed out" if guard.hit else _describe(exc)
            if conn.sock is not None:  # connected: the request may have been sent, do not send it twice
                break
        finally:
            guard.cancel()
            conn.close()
    return None, error, address


class _Deadline:
    """Past `seconds`, end the connection's blocked read (shutdown wakes it)."""

    def __init__(self, conn, seconds: float):
        self.conn, self.hit = conn, False
        self.timer = threading.Timer(seconds, self._cut)
        self.timer.daemon = True
        self.timer.start()

    def _cut(self) -> None:
        self.hit = True
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self.timer.cancel()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
