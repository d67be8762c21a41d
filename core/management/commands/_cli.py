"""Shared bits of the queue_* management commands: turning the errors an
operator can cause (bad input, unknown names, Redis down or full, unreadable
files) into a one-line CommandError instead of a traceback."""
from __future__ import annotations

import contextlib
from datetime import datetime, timezone
from urllib.parse import urlsplit, urlunsplit

import redis
from django.core.management.base import CommandError
from django.db import DatabaseError

from queueadmin.core import conf, operations
from queueadmin.core.engine.errors import QueueError, describe
from queueadmin.core.engine.client.limits import check_text
from queueadmin.core.engine.store.scripts import ScriptError


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def redis_location() -> str:
    """REDIS_URL without its password, for error messages."""
    url = conf.redis_url() or ""
    try:
        parts = urlsplit(url)
        if parts.password:
            host = parts.hostname or ""
            netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
            return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        pass
    return url


@contextlib.contextmanager
def user_errors():
    try:
        yield
    except CommandError:
        raise
    except QueueError as exc:
        raise CommandError(one_line(exc)) from None
    except redis.RedisError as exc:  # down, silent, full, read-only, loading...: one line, no Lua internals
        raise CommandError(describe(exc, redis_location())) from None
    except ScriptError as exc:
        raise CommandError(one_line(exc)) from None
    except DatabaseError as exc:
        raise CommandError(f"database error: {one_line(exc)} (did you run `python manage.py migrate`?)") from None
    except UnicodeDecodeError as exc:
        raise CommandError(f"input is not valid UTF-8 text: {one_line(exc)}") from None
    except UnicodeEncodeError:  # a lone surrogate (e.g. undecodable bytes in an argument)
        raise CommandError("input is not valid Unicode text (it holds a lone surrogate)") from None
    except OSError as exc:
        raise CommandError(one_line(exc)) from None


def push_queue(name: str) -> None:
    """Before a submission: a queue configured in the database but unknown to
    Redis (a fresh install before any worker ran) is pushed to it
    (operations.push_queues). Only that queue, and only then: commands do not
    rewrite configuration on each call."""
    check_text(name, "the queue name")
    operations.push_queues([name])


def iso(epoch) -> str | None:
    """Epoch seconds (or milliseconds) -> ISO 8601 UTC, None when unset."""
    if epoch in (None, ""):
        return None
    try:
        value = float(epoch)
    except (TypeError, ValueError):
        return str(epoch)
    if value > 1e11:  # milliseconds
        value /= 1000
    return datetime.fromtimestamp(value, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
