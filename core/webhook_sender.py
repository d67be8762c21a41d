"""Sending webhook deliveries: a thread in each worker process (started with
Django's side of the worker, core.launch) claims due deliveries from Redis
(core.engine.webhook_store: one atomic claim, so no two senders send the
same attempt), checks the target again, POSTs the body signed, and records
the attempt: delivered (2xx), tried again with exponential backoff (any
other answer, a timeout, a refused connection) for up to a day, or closed
(refused by the target policy, or the signing token deleted).

The connection goes to an address `core.webhooks.check_target` has just
checked, with the URL's host name in `Host` and in TLS (SNI and certificate
check), so a name that resolves to a public address at the check and to a
private one a moment later (DNS rebinding) reaches nothing new. Redirects are
not followed; proxies from the environment are not used.
"""
from __future__ import annotations

import http.client
import logging
import os
import socket
import threading
import time

import redis
from django.db import DatabaseError, connection

from queueadmin.core import conf
from queueadmin.core import webhooks
from queueadmin.core.engine import webhook_store

log = logging.getLogger("queueadmin.webhooks")

CLAIM = 8  # deliveries claimed at once
LEASE_MS = 180_000  # a claim lasts this long (8 sends of a few seconds at most, and a slow DNS)
_wake = threading.Event()
_started: dict[int, threading.Thread] = {}  # pid -> the sender thread (a forked child starts its own)


def wake() -> None:
    """A delivery was made in this process: send it now, not at the next poll."""
    _wake.set()


def start() -> threading.Thread:
    """Start this process's sender thread once."""
    thread = _started.get(os.getpid())
    if thread is None or not thread.is_alive():
        thread = threading.Thread(target=Sender().run, name="webhooks", daemon=True)
        _started[os.getpid()] = thread
        thread.start()
    return thread


class Sender:
    def __init__(self, client=None):
        from queueadmin.core import services

        self.client = client or services.engine()
        self.timeout = float(conf.get("WEBHOOK_TIMEOUT_SECONDS"))
        self.first = float(conf.get("WEBHOOK_BACKOFF_SECONDS"))
        self.most = float(conf.get("WEBHOOK_BACKOFF_MAX_SECONDS"))
        self.give_up_ms = int(float(conf.get("WEBHOOK_GIVE_UP_SECONDS")) * 1000)
        self.poll = float(conf.get("WEBHOOK_POLL_SECONDS"))

    def run(self, stop: threading.Event | None = None) -> None:
        delay = self.poll
        while stop is None or not stop.is_set():
            try:
                sent = self.deliver_due()
                delay = self.poll
            except redis.RedisError as exc:  # ridden out like the worker does
                sent, delay = 0, min(30.0, delay * 2)
                log.warning("webhooks: %s; retrying in %.0fs", exc, delay)
            except Exception:
                sent, delay = 0, min(30.0, delay * 2)
                log.exception("webhooks: sending failed")
            if not sent:
                _wake.wait(delay)
                _wake.clear()

    def deliver_due(self) -> int:
        """Claim what is due and send it; returns how many were tried."""
        webhook_store.sweep(self.client)
        deadline, ids = webhook_store.claim(self.client, LEASE_MS, CLAIM)
        for did in ids:
            self.deliver(did, deadline)
        return len(ids)

    def deliver(self, did: str, deadline: int) -> None:
        delivery = webhook_store.load(self.client, did)
        rid = did.rpartition("-")[0]
        if delivery is None:  # expired meanwhile: the script drops it from the due set
            webhook_store.record(self.client, did, rid, deadline, {}, "failed")
            return
        attempts = int(delivery.get("attempts", 0) or 0)
        attempt, state = self.attempt(did, delivery, attempts + 1)
        if state == "pending":
            next_at = webhook_store.next_attempt(delivery, attempts + 1, self.first, self.most, self.give_up_ms)
            state = "pending" if next_at is not None else "failed"
        else:
            next_at = None
        webhook_store.record(self.client, did, delivery.get("request", rid), deadline, attempt, state,
                             next_at or 0)
        log.info("webhook %s attempt %d to %s: %s", did, attempts + 1, delivery.get("url", "")[:200],
                 attempt.get("status") or attempt.get("error"))

    def attempt(self, did: str, delivery: dict, n: int) -> tuple[dict, str]:
        """One attempt: (its record, the state after it: delivered, pending
        (try again), failed or refused)."""
        started = time.time()
        try:
            secret = webhooks.signer_secret(delivery.get("signer", ""))
        except DatabaseError as exc:  # down, or a connection it dropped: a fresh one next time
            connection.close()
            return {"at": started, "error": f"database unavailable ({type(exc).__name__})"}, "pending"
        if secret is None:
            return {"at": started, "error": "the API token that submitted the request is gone: "
                                            "nothing to sign with"}, "failed"
        try:
            target = webhooks.check_target(delivery.get("url", ""))
        except webhooks.Unresolved as exc:
            return {"at": started, "error": str(exc)}, "pending"
        except webhooks.Refused as exc:
            return {"at": started, "error": f"refused: {exc}"}, "refused"
        body = delivery.get("body", "").encode()
        headers = {"Content-Type": "application/json", "User-Agent": "queueadmin-webhooks/1",
                   "X-Queueadmin-Delivery": did, "X-Queueadmin-Attempt": str(n),
                   "X-Queueadmin-Timestamp": str(int(started)),
                   webhooks.SIGNATURE_HEADER: webhooks.sign(secret, body)}
        status, error, address = post(target, body, headers, self.timeout)
        record = {"at": started, "ms": int((time.time() - started) * 1000), "address": address}
        if status is not None:
            record["status"] = status
        if error:
            record["error"] = error
        return record, "delivered" if status is not None and 200 <= status < 300 else "pending"


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
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def post(target: webhooks.Target, body: bytes, headers: dict, timeout: float) -> tuple[int | None, str, str]:
    """(status or None, error, address used). The next address is tried only
    when a connection could not be made (nothing was sent). The answer's
    status line and headers must come within 3 x timeout in all (a receiver
    trickling bytes cannot hold the sender); its body is not read."""
    cls = _PinnedHTTPS if target.scheme == "https" else _PinnedHTTP
    error, address = "no address", ""
    for address in target.addresses:
        conn = cls(target.host, target.port, address, timeout)
        guard = _Deadline(conn, 3 * timeout)
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
