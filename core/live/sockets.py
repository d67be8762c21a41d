"""Limits and lifetimes of the dashboard's WebSockets (see core/live/consumers.py).

* Topics: a socket watches one topic, named in its URL, and it must be one
  of the exact forms the pages use and name something that exists (a known
  queue, a request that exists, a page number: core/live/topics.py).
  Anything else is refused, so a topic costs a render only when it shows
  something.
* Caps, per USER (across all of that user's sessions and tabs, so that
  signing in again gives no more): at most `MAX_SOCKETS_PER_USER` open
  sockets (hence at most that many topics), at most `OPENS_BURST` opens at
  once and one a second after that, at most `MESSAGE_BURST` messages at
  once and `MESSAGE_RATE` a second after that over all of the user's
  sockets; `refresh` is served at most once per `REFRESH_INTERVAL` per
  socket. Per process: at most `MAX_TOPICS` distinct topics (each distinct
  topic is a render on every update), far more than one user may hold, so
  one user cannot use them up for the others.
* Lifetime: a socket closes when its session ends: at once on logout (the
  `user_logged_out` signal) and when its user is saved (a password change
  invalidates the other sessions, an account deactivated or no longer
  staff), and in any case at the next check of every open session, every
  `SESSION_CHECK_SECONDS` (which covers a logout served by another process,
  an expired or deleted session).

Close codes (the browser sees them in its close event; static/queueadmin/app.js
reloads the page on 4401). The caps count per server process.
  4400  not a topic a page uses, or it names nothing that exists
  4401  the session ended (logged out, password changed, expired)
  4403  not signed in as active staff (refused at the handshake: the
        browser sees a failed connection)
  4429  too many: sockets or opens of this user, topics in this process,
        or messages of this user
  1013  try again later: what the topic names could not be checked (Redis
        or the database away); the page reconnects after a pause
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from importlib import import_module

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user, get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import close_old_connections, transaction
from django.db.models.signals import post_delete, post_save

log = logging.getLogger("queueadmin.relay")

CLOSE_BAD_TOPIC = 4400
CLOSE_SESSION_ENDED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_TOO_MANY = 4429
CLOSE_TRY_LATER = 1013  # the check of a topic failed (Redis or the database away): the page reconnects later

MAX_SOCKETS_PER_USER = 12  # a user's tabs, in all of their browsers and sessions
OPENS_BURST = 2 * MAX_SOCKETS_PER_USER  # every tab reconnecting at once after a restart, twice
MAX_TOPICS = 200
MAX_MESSAGE_BYTES = 1024
MESSAGE_BURST = 20  # a user's refreshes at once (every tab's socket once, after resuming live)
MESSAGE_RATE = 1.0
REFRESH_INTERVAL = 1.0
SESSION_CHECK_SECONDS = 5.0


class Bucket:
    """A token bucket: `burst` at once, then `rate` a second."""

    def __init__(self, rate: float, burst: float):
        self.rate, self.burst = rate, burst
        self.level, self.at = burst, time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.burst, self.level + (now - self.at) * self.rate)
        self.at = now

    def take(self, amount: float = 1.0) -> bool:
        """Take `amount` if there is that much; False (nothing taken) otherwise."""
        self._refill()
        if self.level < amount:
            return False
        self.level -= amount
        return True

    def spend(self, amount: float) -> None:
        """Take `amount` whatever is left (the level may go below zero)."""
        self._refill()
        self.level -= amount

    def wait(self) -> float:
        """Seconds until the level is above zero again."""
        self._refill()
        return 0.0 if self.level > 0 else -self.level / self.rate + 0.001


# -- who is connected -----------------------------------------------------------


class Allowance:
    """What one user may still do in this process: opens and messages."""

    def __init__(self):
        self.opens = Bucket(rate=1.0, burst=OPENS_BURST)
        self.messages = Bucket(rate=MESSAGE_RATE, burst=MESSAGE_BURST)


class Registry:
    """The open sockets of this process, by user, and what each user may
    still do. Read and changed from event loops and from signal handlers
    (other threads)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_user: dict = {}
        self.allowances: dict = {}  # by user id: at most one per staff account
        self.checkers: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}

    def allowance(self, user_id) -> Allowance:
        with self.lock:
            return self.allowances.setdefault(user_id, Allowance())

    def admit(self, consumer) -> bool:
        """Count the socket against its user's caps (False: over one)."""
        with self.lock:
            members = self.by_user.setdefault(consumer.user_id, set())
            allowance = self.allowances.setdefault(consumer.user_id, Allowance())
            if len(members) >= MAX_SOCKETS_PER_USER or not allowance.opens.take():
                if not members:
                    del self.by_user[consumer.user_id]
                return False
            members.add(consumer)
        self._ensure_checker(consumer.loop)
        return True

    def leave(self, consumer) -> None:
        with self.lock:
            members = self.by_user.get(consumer.user_id)
            if members is not None:
                members.discard(consumer)
                if not members:
                    del self.by_user[consumer.user_id]

    def count(self, user_id) -> int:
        with self.lock:
            return len(self.by_user.get(user_id, ()))

    def of(self, match) -> list:
        with self.lock:
            return [c for members in self.by_user.values() for c in members if match(c)]

    # -- closing, from any thread -------------------------------------------

    def close(self, consumers, code: int) -> None:
        for c in consumers:
            c.loop.call_soon_threadsafe(_close_soon, c, code)

    def recheck(self, consumers) -> None:
        by_loop: dict = {}
        for c in consumers:
            by_loop.setdefault(c.loop, []).append(c)
        for loop, members in by_loop.items():
            loop.call_soon_threadsafe(lambda members=members: asyncio.ensure_future(check(members)))

    # -- the periodic check, one task per event loop --------------------------

    def _ensure_checker(self, loop) -> None:
        task = self.checkers.get(loop)
        if task is None or task.done():
            self.checkers[loop] = loop.create_task(self._check_forever(loop), name="sockets-session-check")

    async def _check_forever(self, loop) -> None:
        try:
            while True:
                await asyncio.sleep(SESSION_CHECK_SECONDS)
                members = self.of(lambda c: c.loop is loop)
                if not members:
                    return
                await check(members)
        finally:
            if self.checkers.get(loop) is asyncio.current_task():
                del self.checkers[loop]


sockets = Registry()


def _close_soon(consumer, code: int) -> None:
    asyncio.ensure_future(consumer.end(code))


async def check(consumers) -> None:
    """Close the sockets whose session ended; each session is checked once."""
    groups: dict[tuple, list] = {}
    for c in consumers:
        groups.setdefault((c.session_key, c.user_id), []).append(c)
    for (key, uid), members in groups.items():
        try:
            ok = await sync_to_async(session_valid, thread_sensitive=False)(key, uid)
        except Exception:  # the database is away: keep the sockets, check again later
            log.warning("sockets: could not check a session", exc_info=True)
            continue
        if not ok:
            for c in members:
                await c.end(CLOSE_SESSION_ENDED)


class _Request:
    def __init__(self, session):
        self.session = session


def session_valid(session_key: str | None, user_id) -> bool:
    """Does the session still sign in this user, as active staff? The same
    test as for an HTTP request (`auth.get_user`: the session exists, has
    not expired, and its password hash still matches the user's)."""
    close_old_connections()
    try:
        if session_key:
            store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
            user = get_user(_Request(store))
        else:  # no session (a test's scope): the user must still exist and be allowed in
            user = get_user_model().objects.filter(pk=user_id).first()
        return bool(user is not None and user.is_authenticated and user.pk == user_id and user.is_active
                    and user.is_staff)
    finally:
        close_old_connections()


# -- signals: end sockets at once ---------------------------------------------------


def _on_logout(sender, request=None, user=None, **kwargs) -> None:
    session = getattr(request, "session", None)
    key = getattr(session, "session_key", None)
    if key:
        sockets.close(sockets.of(lambda c: c.session_key == key), CLOSE_SESSION_ENDED)


def _on_user_saved(sender, instance=None, **kwargs) -> None:
    pk = getattr(instance, "pk", None)
    if pk is not None and sockets.by_user:
        transaction.on_commit(lambda: sockets.recheck(sockets.of(lambda c: c.user_id == pk)))


def _on_user_deleted(sender, instance=None, **kwargs) -> None:
    pk = getattr(instance, "pk", None)
    if pk is not None and sockets.by_user:
        sockets.close(sockets.of(lambda c: c.user_id == pk), CLOSE_SESSION_ENDED)


user_logged_out.connect(_on_logout, dispatch_uid="queueadmin.sockets.logout")
post_save.connect(_on_user_saved, sender=settings.AUTH_USER_MODEL, dispatch_uid="queueadmin.sockets.user_saved")
post_delete.connect(_on_user_deleted, sender=settings.AUTH_USER_MODEL, dispatch_uid="queueadmin.sockets.user_deleted")
