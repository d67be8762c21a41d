"""Submit a file as one request: one item per line.

    python manage.py queue_submit items.txt --queue default --processor uppercase
    seq 1 100 | python manage.py queue_submit - --processor sha256 --priority 90

The request id is the last line of output (so `| tail -n1` gets it).
"""
from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from queueadmin.core import operations
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.client.limits import check_count, check_item
from queueadmin.core.webhooks import policy as webhooks

from ._cli import push_queue, user_errors


def split_lines(text: str) -> list[str]:
    """One item per line: line endings stripped, a final empty line skipped."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


class Command(BaseCommand):
    help = "Submit a file (one item per line; '-' reads standard input) as one request; prints its id last."
    # No system checks: they would import every URLconf and view on each call;
    # `manage.py check` and `migrate` still run them.
    requires_system_checks = []
    stealth_options = ("stdin",)

    def add_arguments(self, parser):
        parser.add_argument("file", help="file with one item per line, or '-' for standard input")
        parser.add_argument("--queue", "-q", default="default", help="queue name (default: default)")
        parser.add_argument("--processor", "-p", required=True, help="processor name, e.g. uppercase")
        parser.add_argument("--priority", type=int, help="0-99, higher first (default: the queue's)")
        parser.add_argument("--concurrency", type=int,
                            help="most items of this request in flight at once (default: the queue's)")
        parser.add_argument("--delay", type=float, default=0, metavar="SECONDS",
                            help="start no earlier than this many seconds from now")
        parser.add_argument("--expires-in", type=float, metavar="SECONDS",
                            help="items not started within this many seconds are marked expired")
        parser.add_argument("--dedup-key", metavar="KEY",
                            help="refuse a duplicate while a request with this key is pending or running "
                                 "(default: a hash of the processor and items)")
        parser.add_argument("--no-dedup", action="store_true", help="never treat this request as a duplicate")
        parser.add_argument("--time-limit", type=float, metavar="SECONDS",
                            help="stop an item running longer than this (0 = no limit; default: the queue's)")
        parser.add_argument("--rate-limit", metavar="N/UNIT",
                            help="at most N of its items start in any such window, across all workers: "
                                 "20/s, 600/min, 10000/h (docs/usage.md \"Rate limits\")")
        parser.add_argument("--group", metavar="NAME",
                            help="the request's group (a tenant): its items count against the group's limits "
                                 "and take fair turns with other groups (docs/usage.md \"Groups\")")
        parser.add_argument("--json", action="store_true", help="each line is a JSON value, not plain text")
        parser.add_argument("--callback-url", metavar="URL",
                            help="POST the request's summary there when it finishes, signed with the site's "
                                 "webhook secret (docs/usage.md \"Webhooks\")")
        parser.add_argument("--then-processor", metavar="P",
                            help="when this request finishes, submit one that follows it with processor P "
                                 "(docs/usage.md \"Chained requests\")")
        parser.add_argument("--then-mode", choices=("each", "all"), default="each",
                            help="each: one item per successful result (default); all: one item, every result")
        parser.add_argument("--then-queue", metavar="Q", help="the follow-up's queue (default: this one's)")
        parser.add_argument("--then-on-failure", action="store_true",
                            help="follow also when this request fails, is cancelled or expires")

    def handle(self, *args, **options):
        if options.get("callback_url") is not None:
            problem = webhooks.refusal(options["callback_url"])
            if problem:
                raise CommandError(f"--callback-url refused: {problem}")
        with user_errors():
            items = self.read_items(options["file"], options.get("stdin"), options["json"])
            push_queue(options["queue"])
            extra = {}
            if options.get("then_processor"):
                extra["then"] = {"processor": options["then_processor"], "mode": options["then_mode"],
                                 "on_failure": options["then_on_failure"]}
                if options.get("then_queue"):
                    push_queue(options["then_queue"])
                    extra["then"]["queue"] = options["then_queue"]
            elif options.get("then_queue") or options.get("then_on_failure"):
                raise CommandError("--then-queue and --then-on-failure need --then-processor")
            if options["no_dedup"]:
                if options["dedup_key"]:
                    raise CommandError("--dedup-key and --no-dedup exclude each other")
                extra["dedup"] = False
            sub = operations.submit(
                options["queue"], options["processor"], items, priority=options["priority"],
                concurrency=options["concurrency"], delay=options["delay"], expires_in=options["expires_in"],
                dedup_key=options["dedup_key"], time_limit=options["time_limit"],
                rate_limit=options.get("rate_limit"), callback_url=options.get("callback_url"),
                group=options.get("group"), **extra)
        if sub.duplicate:
            self.stdout.write("duplicate of an existing request")
        elif options["verbosity"] >= 1:
            when = f", scheduled to start in {options['delay']:g}s" if sub.scheduled else ""
            self.stdout.write(f"submitted {len(items)} item(s) to queue {options['queue']}{when}")
        self.stdout.write(sub.id)

    @staticmethod
    def read_items(path: str, stdin=None, as_json: bool = False) -> list:
        """The items, each checked as the engine will (valid Unicode, size),
        so that an error names the line."""
        if path == "-":
            stream = stdin or sys.stdin
            buffer = getattr(stream, "buffer", None)  # bytes, decoded strictly (not the locale's way)
            text = buffer.read().decode("utf-8") if buffer is not None else stream.read()
        else:
            with open(path, encoding="utf-8", newline="") as f:
                text = f.read()
        lines = split_lines(text)
        if not lines:
            raise CommandError(f"{'standard input' if path == '-' else path} has no items (one item per line)")
        check_count(len(lines))
        items = lines
        if as_json:
            items = []
            for n, line in enumerate(lines, 1):
                try:
                    items.append(json.loads(line))
                except (ValueError, RecursionError) as exc:
                    raise CommandError(f"line {n} is not JSON: {' '.join(str(exc).split())[:200]}") from None
        for n, item in enumerate(items, 1):
            try:
                check_item(item, f"line {n}")
            except QueueError as exc:
                raise CommandError(str(exc)) from None
        return items
