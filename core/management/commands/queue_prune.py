"""`manage.py queue_prune`: delete finished requests' history rows older than
the retention (core/retention.py).

    python manage.py queue_prune                                  # as QUEUEADMIN["HISTORY_RETENTION"] says
    python manage.py queue_prune --older-than 30                  # every finished state, 30 days
    python manage.py queue_prune --state failed --older-than 90   # failed ones only
    python manage.py queue_prune --dry-run                        # count only

Without --older-than, each state's days come from the setting; --state
(repeatable, or comma-separated) limits the prune to those states. Rows go
in batches of --batch-size (each batch one statement, committed on its own),
with a line of progress per batch; live requests are never touched. A prune
that deletes something leaves an entry in the audit log (the Activity page).
"""
from __future__ import annotations

import math
import time

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from queueadmin.core import retention
from queueadmin.core.audit import Actor

from ._cli import user_errors


def positive_int(text, flag: str, most: int) -> int:
    value = str(text).strip()  # a string from the command line, or a number through call_command
    if not value.isascii() or not value.isdigit() or len(value) > 9 or not 1 <= int(value) <= most:
        raise CommandError(f"{flag} {text!r}"[:120] + f": give a whole number from 1 to {most:,}")
    return int(value)


def days(text) -> float:
    given = str(text).strip()
    try:
        value = float(given) if given.isascii() else math.nan
    except ValueError:
        value = math.nan
    try:
        return retention.check_days(value, "--older-than", zero=True)
    except retention.RetentionError:
        raise CommandError(f"--older-than {text!r}"[:120] + f": give a number of days from 0 to "
                           f"{retention.MAX_DAYS:,} (e.g. 30, or 0.5 for 12 hours)") from None


def states(values: list[str]) -> list[str]:
    out: list[str] = []
    for value in values:
        for name in (value or "").split(","):
            name = name.strip()
            if not name:
                continue
            try:
                name = retention.check_state(name, "--state")
            except retention.RetentionError as exc:
                raise CommandError(str(exc)) from None
            if name not in out:
                out.append(name)
    if values and not out:
        raise CommandError(f"--state names no state: use {', '.join(retention.FINISHED_STATES)}")
    return out


class Command(BaseCommand):
    help = "Delete finished requests' history rows older than the retention, in batches."

    def add_arguments(self, parser):
        parser.add_argument("--older-than", metavar="DAYS", default=None,
                            help="prune rows finished more than DAYS days ago (default: "
                                 "QUEUEADMIN['HISTORY_RETENTION'], per state)")
        parser.add_argument("--state", action="append", default=[], metavar="STATE",
                            help=f"only this finished state ({', '.join(retention.FINISHED_STATES)}); "
                                 "repeat it or separate with commas")
        parser.add_argument("--dry-run", action="store_true", help="count what would go, delete nothing")
        parser.add_argument("--batch-size", metavar="N", default=str(retention.DEFAULT_BATCH),
                            help=f"rows per DELETE (default {retention.DEFAULT_BATCH}, at most "
                                 f"{retention.MAX_BATCH:,})")

    def handle(self, *args, older_than, state, dry_run, batch_size, verbosity=1, **options):
        batch = positive_int(batch_size, "--batch-size", retention.MAX_BATCH)
        wanted = states(state)
        rules = self.rules(None if older_than is None else days(older_than), wanted)
        if not rules:
            self.stdout.write("Nothing to prune: QUEUEADMIN['HISTORY_RETENTION'] keeps the history for ever "
                              "(give --older-than DAYS to prune anyway).")
            return
        now = timezone.now()
        loud = verbosity >= 1
        for s, d in rules.items():
            if loud:
                self.stdout.write(f"{s}: finished more than {retention.days_text(d)} ago (before "
                                  f"{retention.cutoff(d, now):%Y-%m-%d %H:%M} UTC)")
        started = time.monotonic()

        def progress(s, n, total):
            if loud:
                self.stdout.write(f"  {s}: deleted {n:,} (so far {total:,}, {time.monotonic() - started:.1f}s)")

        with user_errors():
            counts = retention.prune(rules, batch_size=batch, dry_run=dry_run, now=now, progress=progress)
            if not dry_run:
                retention.record(counts, rules, Actor.command("queue_prune"))
        total = sum(counts.values())
        each = ", ".join(f"{s} {n:,}" for s, n in counts.items())
        if dry_run:
            self.stdout.write(f"Dry run: {total:,} row(s) would be deleted ({each}); nothing was deleted.")
        else:
            self.stdout.write(f"Deleted {total:,} row(s) ({each}) in {time.monotonic() - started:.1f}s.")

    def rules(self, older: float | None, wanted: list[str]) -> dict[str, float]:
        if older is not None:
            return {s: older for s in (wanted or retention.FINISHED_STATES)}
        try:
            configured = retention.policy()
        except retention.RetentionError as exc:
            raise CommandError(f"{exc} (or give --older-than DAYS)") from None
        if not wanted:
            return configured
        missing = [s for s in wanted if s not in configured]
        if missing:
            raise CommandError(f"QUEUEADMIN['HISTORY_RETENTION'] keeps {', '.join(missing)} for ever: "
                               "give --older-than DAYS to prune it")
        return {s: configured[s] for s in wanted}
