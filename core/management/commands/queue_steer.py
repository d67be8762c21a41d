"""Steer the queue from the command line, as the dashboard and the API do:

    python manage.py queue_steer cancel REQUEST_ID
    python manage.py queue_steer priority REQUEST_ID 90
    python manage.py queue_steer concurrency REQUEST_ID 4
    python manage.py queue_steer retry REQUEST_ID [ENTRY ...]     # dead letters; all without entries
    python manage.py queue_steer discard REQUEST_ID [ENTRY ...]
    python manage.py queue_steer requeue REQUEST_ID [ENTRY ...]   # in-flight items; all without entries
    python manage.py queue_steer stop REQUEST_ID ENTRY
    python manage.py queue_steer run-now REQUEST_ID               # a scheduled request
    python manage.py queue_steer pause QUEUE | resume QUEUE

Each goes through core/operations.py and is recorded in the audit log as
"command queue_steer" with the OS user who ran it. One line says what was
done; bad input or Redis trouble is one line on stderr and exit status 1.
"""
from __future__ import annotations

import re

from django.core.management.base import BaseCommand, CommandError

from queueadmin.core import clients, operations
from queueadmin.core.audit import Actor
from queueadmin.core.engine.config import MAX_CONCURRENCY
from queueadmin.core.models import Queue

from ._cli import user_errors

RID = re.compile(r"^[0-9A-Za-z_-]{1,32}$")
ENTRY = re.compile(r"^\d{1,20}-\d{1,20}$")
ACTOR_NAME = "queue_steer"


class Command(BaseCommand):
    help = "Cancel, reprioritise, retry, discard, requeue, stop, run now; pause or resume a queue (audited)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        for name in ("cancel", "run-now"):
            sub.add_parser(name).add_argument("request_id")
        for name, what in (("priority", "0-99"), ("concurrency", f"1-{MAX_CONCURRENCY}")):
            one = sub.add_parser(name)
            one.add_argument("request_id")
            one.add_argument("value", help=what)
        for name in ("retry", "discard", "requeue"):
            many = sub.add_parser(name)
            many.add_argument("request_id")
            many.add_argument("entries", nargs="*", help="entry ids (default: all)")
        stop = sub.add_parser("stop")
        stop.add_argument("request_id")
        stop.add_argument("entry")
        for name in ("pause", "resume"):
            sub.add_parser(name).add_argument("queue")

    def handle(self, *args, action, **options):
        actor = Actor.command(ACTOR_NAME)
        with user_errors():
            if action in ("pause", "resume"):
                line = _set_paused(options["queue"], action == "pause", actor)
            else:
                line = STEPS[action](_rid(options["request_id"]), options, actor)
        self.stdout.write(line)


def _rid(value: str) -> str:
    if not RID.match(value or ""):
        raise CommandError(f"{value[:40]!r} is not a request id")
    return value


def _entries(values: list[str]) -> list[str] | None:
    bad = [v for v in values if not ENTRY.match(v)]
    if bad:
        raise CommandError(f"{bad[0][:40]!r} is not an entry id (like 1700000000000-0)")
    return list(dict.fromkeys(values)) or None


def _number(text: str, name: str, lo: int, hi: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise CommandError(f"{name} must be a whole number from {lo} to {hi}") from None
    if not lo <= value <= hi:
        raise CommandError(f"{name} must be from {lo} to {hi}")
    return value


def _set_paused(queue: str, paused: bool, actor) -> str:
    if not (Queue.objects.filter(name=queue).exists() or queue in clients.engine().queues()):
        raise CommandError(f"unknown queue {queue[:64]!r}")
    operations.set_paused(queue, paused, actor=actor)
    return f"queue {queue} {'paused' if paused else 'resumed'}"


def _cancel(rid, options, actor):
    operations.cancel(rid, actor=actor)
    return f"request {rid} cancelled"


def _priority(rid, options, actor):
    value = _number(options["value"], "priority", 0, 99)
    operations.set_priority(rid, value, actor=actor)
    return f"request {rid}: priority {value}"


def _concurrency(rid, options, actor):
    value = _number(options["value"], "concurrency", 1, MAX_CONCURRENCY)
    operations.set_concurrency(rid, value, actor=actor)
    return f"request {rid}: concurrency limit {value}"


def _retry(rid, options, actor):
    n = operations.retry_dead(rid, _entries(options["entries"]), actor=actor)
    return f"request {rid}: {n} dead letter(s) sent back"


def _discard(rid, options, actor):
    n = operations.discard(rid, _entries(options["entries"]), actor=actor)
    return f"request {rid}: {n} dead letter(s) discarded"


def _requeue(rid, options, actor):
    entries = _entries(options["entries"])
    if entries is None:  # all of its items in flight now
        client = clients.engine()
        client.status(rid) or _unknown(rid)
        entries = client.redis.zrange(client.keys.request(rid).leases, 0, -1)
    n = operations.requeue([(rid, e) for e in entries], actor=actor) if entries else 0
    return f"request {rid}: {n} item(s) requeued"


def _stop(rid, options, actor):
    entry = _entries([options["entry"]])[0]
    if not operations.stop_item(rid, entry, actor=actor):
        raise CommandError(f"item {entry} of request {rid} is not running")
    return f"request {rid}: item {entry} asked to stop"


def _run_now(rid, options, actor):
    status = clients.engine().status(rid) or _unknown(rid)
    if not operations.run_now(status["queue"], rid, actor=actor):
        raise CommandError(f"request {rid} is not scheduled")
    return f"request {rid} runs now"


def _unknown(rid):
    raise CommandError(f"request {rid} is not in the queue (unknown, or finished past its retention)")


STEPS = {"cancel": _cancel, "priority": _priority, "concurrency": _concurrency, "retry": _retry,
         "discard": _discard, "requeue": _requeue, "stop": _stop, "run-now": _run_now}
