"""Logs an operator can ship: QUEUEADMIN_LOG_FORMAT=json makes every line one
JSON object (python-json-logger), from the web server and the workers alike.

Fields: time (ISO 8601, UTC), level, logger, message, then whatever the call
passed in `extra=`. The engine's per-item lines use these names:

    request_id  the request's id          index     the item's index
    queue       the queue's name           worker    the worker's id
    attempt     the attempt number (1..)   duration  run time in seconds
    outcome     done / retry / dead / ...

and a failure's traceback comes as `exc_info`. Plain text stays the default.
"""
from __future__ import annotations

import logging
import os
from datetime import datetime, timezone

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

FIELDS = ("request_id", "index", "queue", "worker", "attempt", "duration", "outcome")


def log_format() -> str:
    """"json" or "plain" (the default), from QUEUEADMIN_LOG_FORMAT."""
    return "json" if os.environ.get("QUEUEADMIN_LOG_FORMAT", "").strip().lower() == "json" else "plain"


class JsonFormatter(_JsonFormatter):
    """One JSON object per record: time, level, logger, message, extras."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("rename_fields", {"levelname": "level", "name": "logger"})
        # uvicorn adds a coloured copy of its message; the plain one is enough
        kwargs.setdefault("reserved_attrs", [*RESERVED_ATTRS, "color_message"])
        super().__init__(["levelname", "name", "message"], *args, **kwargs)

    def add_fields(self, log_data: dict, record: logging.LogRecord, message_dict: dict) -> None:
        log_data["time"] = datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds")
        super().add_fields(log_data, record, message_dict)
