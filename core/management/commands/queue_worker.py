"""`manage.py queue_worker`: run workers (a thin shim over core.engine.worker)."""
import logging
import sys

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from core import services
from core.engine.pool import Pool
from core.engine.processors import Processors
from core.engine.worker import Worker


class Command(BaseCommand):
    help = "Process items of one or more queues (higher priority first)."

    def add_arguments(self, parser):
        parser.add_argument("--queues", default="default",
                            help="comma-separated queue names, served in this order (default: default)")
        parser.add_argument("--processes", type=int, default=1, help="worker processes to run (default 1)")
        parser.add_argument("--burst", action="store_true", help="exit 0 once nothing is left to do")
        parser.add_argument("--name", default="", help="a name shown in the dashboard")

    def handle(self, *args, queues, processes, burst, name, **options):
        logging.getLogger("queueadmin").setLevel(logging.INFO)
        names = [q.strip() for q in queues.split(",") if q.strip()]
        if processes < 1:
            raise CommandError("--processes must be at least 1")
        try:
            services.sync_queues()
            known = services.engine().queues()  # the database's queues and any defined in Redis only
        except redis.RedisError as exc:
            raise CommandError(f"cannot reach Redis at {settings.REDIS_URL}: {exc}")
        unknown = [q for q in names if q not in known]
        if not names or unknown:
            raise CommandError(f"unknown queue(s): {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}")
        if processes > 1:
            command = [sys.executable, sys.argv[0], "queue_worker", "--queues", ",".join(names)]
            if burst:
                command.append("--burst")
            code = Pool(command, processes, burst=burst).run()
            if code:
                raise CommandError(f"a worker process exited with {code}")
            return
        conf = settings.QUEUEADMIN
        worker = Worker(services.engine(), names, Processors(conf["PROCESSORS"]), name=name, burst=burst,
                        heartbeat=conf["HEARTBEAT_SECONDS"], dead_after=conf["DEAD_AFTER_SECONDS"],
                        aging_seconds=conf["AGING_SECONDS"], on_finish_many=services.record_many,
                        report_in_background=True)
        worker.work()
