"""Print a request's results as JSON Lines, one per item, ordered by index.

    python manage.py queue_results REQUEST_ID > results.jsonl

Each line: index, status (done, failed, retrying, pending, expired,
cancelled), result (done) or error (failed), attempts, worker, started_at,
finished_at (epoch seconds), and the traceback of a failure.
"""
from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from queueadmin.core import clients

from ._cli import user_errors

FIELDS = ("index", "status", "attempts", "worker", "started_at", "finished_at")


def result_line(record: dict) -> dict:
    out = {"index": record["index"], "status": record.get("status")}
    if "result" in record and record.get("status") == "done":
        out["result"] = record["result"]
    elif "error" in record:
        out["error"] = record["error"]
    elif "result" in record:
        out["result"] = record["result"]
    for f in FIELDS[2:]:
        out[f] = record.get(f)
    for key, value in record.items():
        out.setdefault(key, value)
    return out


class Command(BaseCommand):
    help = "Print a request's results as JSON Lines, one per item, ordered by index."

    def add_arguments(self, parser):
        parser.add_argument("request_id")

    def handle(self, *args, **options):
        with user_errors():  # reads only: nothing is written to Redis
            client = clients.engine()
            for record in client.results(options["request_id"]):
                self.stdout.write(json.dumps(result_line(record), ensure_ascii=False, separators=(",", ":")))
