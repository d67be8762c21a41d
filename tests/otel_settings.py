"""Settings of worker processes that trace (tests/engine/test_otel.py): the
service's own, plus OpenTelemetry's SDK set up as a project does in its
settings, with an exporter that appends each ended span to the file named
by QUEUEADMIN_TEST_SPANS as one JSON line."""
import json
import os
import threading

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from queueadmin.settings import *  # noqa: F401,F403


class FileExporter(SpanExporter):
    def __init__(self, path: str):
        self.path, self.lock = path, threading.Lock()

    def export(self, spans):
        lines = "".join(json.dumps(json.loads(s.to_json(indent=None))) + "\n" for s in spans)
        with self.lock, open(self.path, "a") as f:
            f.write(lines)
        return SpanExportResult.SUCCESS


_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["QUEUEADMIN_TEST_SPANS"])))
trace.set_tracer_provider(_provider)
