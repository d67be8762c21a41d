"""Re-encrypt what Redis holds under the newest encryption key, after a
rotation (docs/operations.md#rotating-encryption-keys).

    python manage.py queue_reencrypt [--batch 200] [--dry-run] [--json]

Every request Redis still holds (live ones, and finished ones kept for their
queue's retention) is looked at: result records (their `result` and `log`
values) and the payloads of one-item requests (kept in a hash) sealed with an
older key are sealed again with the first key of ENCRYPTION_KEYS, each with a
compare-and-set, so a worker's newer write is never overwritten. Payloads in
item streams cannot be rewritten in place: they are counted, with the
requests that hold them; keep the older key configured until those requests
have finished and their retention has passed (run the command again: it says
when nothing is left under an older key).
"""
from __future__ import annotations

import json
import time

from django.core.management.base import BaseCommand, CommandError
from queueadmin.core import clients
from queueadmin.core.engine.features import encryption
from queueadmin.core.engine.features.reencrypt import Rewrap, reencrypt

from ._cli import user_errors


class Command(BaseCommand):
    help = "Re-encrypt payloads, results and logs sealed with an older key under the newest ENCRYPTION_KEYS key."

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=200, help="requests per round trip (default 200)")
        parser.add_argument("--dry-run", action="store_true", help="count what would be re-encrypted, write nothing")
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")

    def handle(self, *args, **options):
        if not 1 <= options["batch"] <= 10_000:
            raise CommandError("--batch must be between 1 and 10000")
        with user_errors():
            ring = encryption.require()
            client = clients.engine()
            started, last = time.monotonic(), [0.0]
            quiet = options["json"]

            def progress(done: Rewrap) -> None:
                now = time.monotonic()
                if quiet or now - last[0] < 1.0:
                    return
                last[0] = now
                self.stderr.write(f"{done.requests} requests looked at, {done.records} records and "
                                  f"{done.payloads} payloads re-encrypted, {done.in_streams} stream items "
                                  f"under older keys")

            done = reencrypt(client.store, ring, batch=options["batch"], dry_run=options["dry_run"],
                             progress=progress)
        summary = {"newest_key": ring.primary, "dry_run": options["dry_run"],
                   "seconds": round(time.monotonic() - started, 3), **done.as_dict()}
        if options["json"]:
            self.stdout.write(json.dumps(summary))
            return
        verb = "would re-encrypt" if options["dry_run"] else "re-encrypted"
        self.stdout.write(f"{done.requests} requests looked at in {summary['seconds']} s: {verb} "
                          f"{done.records} result records and {done.payloads} payloads under key {ring.primary}.")
        if done.raced:
            self.stdout.write(f"{done.raced} values changed while being re-encrypted (their new writes use the "
                              "newest key already).")
        if done.unreadable:
            self.stdout.write(f"{done.unreadable} values no configured key opens were left as they are.")
        if done.in_streams:
            self.stdout.write(f"{done.in_streams} payloads in item streams stay under older keys (streams cannot "
                              f"be rewritten): keep those keys until their requests are gone. Requests: "
                              f"{', '.join(done.stream_requests)}{' ...' if len(done.stream_requests) >= 20 else ''}")
        else:
            self.stdout.write("Nothing is left under an older key: older keys may be removed from "
                              "ENCRYPTION_KEYS.")
