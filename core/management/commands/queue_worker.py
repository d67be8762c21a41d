"""`manage.py queue_worker`: run workers (a thin shim over core.launch and
core.engine.worker).

`manage.py queue_worker` starts through core.launch without setting Django up
first (see manage.py); this command is the way in for `call_command` and for
queues that only the database knows yet: it pushes the database's queues to
Redis, then serves like the fast path.
"""

import time

import redis
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from queueadmin.core import clients, conf, launch, operations, retention
from queueadmin.core.webhooks import sender as webhook_sender
from queueadmin.core.engine import errors
from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.worker import Worker


class Command(BaseCommand):
    help = launch.HELP
    requires_system_checks = []  # `manage.py check` runs them; a worker starts at once

    def add_arguments(self, parser):
        launch.add_arguments(parser)

    def handle(self, *args, **options):
        launch.show_logs()
        opts = _Options(options)
        if (why := launch.problem(opts)) is not None:
            raise CommandError(why)
        names = launch.queue_names(opts)
        known = self._known_queues()
        unknown = [q for q in names if q not in known]
        if unknown:
            raise CommandError(f"unknown queue(s): {', '.join(unknown)}; known: {', '.join(known)}")
        code = launch.serve(opts, lambda slot, recycled, exit_now: self._worker(opts, slot, recycled, exit_now),
                            before_fork=_close_connections)
        if code:
            raise CommandError(f"a worker process exited with {code}")

    def _known_queues(self) -> list[str]:
        """Push the database's queues to Redis and list every queue. Redis
        trouble at start (down, full, loading) is waited out."""
        where = (conf.redis_url() or "").rpartition("@")[2]
        delay = 0.5
        while True:
            try:
                operations.sync_queues()
                return clients.engine().queues()  # the database's queues and any defined in Redis only
            except redis.RedisError as exc:
                if errors.trouble(exc) is None:
                    raise CommandError(errors.describe(exc, where))
                self.stderr.write(f"{errors.describe(exc, where)}; retrying in {delay:g}s (Ctrl-C to stop)")
                time.sleep(delay)
                delay = min(5.0, delay * 2)

    def _worker(self, opts, slot, recycled, exit_now) -> Worker:
        values = conf.values()
        launch.record_finishes()  # history and webhook deliveries hang on what the worker sees finish
        webhook_sender.start()  # in this process (a forked slot starts its own)
        retention.start()  # prunes the history now and then, when HISTORY_RETENTION is set
        return Worker(clients.engine(), launch.queue_names(opts), Processors(values["PROCESSORS"]),
                      name=launch.slot_name(opts, slot), recycled=recycled, exit_now=exit_now,
                      **launch.worker_options(opts, values))


class _Options:
    """The command's options as attributes, like argparse's namespace."""

    def __init__(self, options: dict):
        self.__dict__.update(options)


def _close_connections() -> None:
    """No socket may be shared by forked children (or leak into an exec)."""
    connections.close_all()
    try:
        clients.redis_client().close()
    except redis.RedisError:
        pass
    clients.reset()
