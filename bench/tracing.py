"""OpenTelemetry tracing (issue 23): the worker's CPU per item with tracing on
and off. Prints a table and writes it to bench/out/tracing.txt.

An in-process burst worker drains N items of a no-op processor (`echo`),
submitted as one request of N items and as N/10 one-item requests (each
read with its own headers); its process CPU time (every thread: dispatch,
runs, the span processor's) per item, in each of these modes:

    off   no hook installed: OpenTelemetry absent, or OPENTELEMETRY False
    api   the hook with OpenTelemetry's API alone (no SDK: the default
          no-op tracer), as install_if_available() leaves a process whose
          project configured no TracerProvider
    sdk   the SDK's TracerProvider, a BatchSpanProcessor and an exporter
          that drops what it gets (the cost of making and exporting spans,
          without the I/O of a real exporter)

Modes alternate within each round; the figure is the median over the
rounds. Also the submit's CPU per request in each mode. Runs its own
redis-server on a free loopback port and stops it at the end.

    .venv/bin/python bench/tracing.py                  # N = 20,000, 3 rounds
    .venv/bin/python bench/tracing.py --items 2000 --rounds 1
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.benchlib import Report, machine_line, table  # noqa: E402
from queueadmin.core import embedded  # noqa: E402
from queueadmin.core.engine import hooks  # noqa: E402
from queueadmin.core.engine.client.queue_client import QueueClient  # noqa: E402
from queueadmin.core.engine.config import QueueConfig  # noqa: E402
from queueadmin.core.engine.integrations import otel  # noqa: E402
from queueadmin.core.engine.runtime.processors import Processors  # noqa: E402
from queueadmin.core.engine.runtime.worker import Worker  # noqa: E402
from queueadmin.core.engine.store.connection import connect  # noqa: E402

PROCESSORS = {"echo": "queueadmin.core.engine.runtime.processors.echo"}
MODES = ("off", "api", "sdk")


def sdk_provider():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def __init__(self):
            self.count = 0

        def export(self, spans):
            self.count += len(spans)
            return SpanExportResult.SUCCESS

    exporter = Drop()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider, exporter


def run(qc: QueueClient, hook, n: int, lean: bool) -> tuple[float, float]:
    """(submit CPU per request, worker CPU per item) with `hook` installed (or none)."""
    if hook is not None:
        hooks.install(hook)
    try:
        t0 = time.process_time()
        if lean:
            for i in range(n // 10):
                qc.submit("bench", "echo", [i], dedup=False)
            requests, items = n // 10, n // 10
        else:
            qc.submit("bench", "echo", list(range(n)), dedup=False)
            requests, items = 1, n
        submit_cpu = (time.process_time() - t0) / requests
        worker = Worker(qc, ["bench"], Processors(PROCESSORS), burst=True, install_signals=False, threads=4)
        t0 = time.process_time()
        worker.work()
        return submit_cpu, (time.process_time() - t0) / items
    finally:
        if hook is not None:
            hooks.uninstall(hook)
        qc.redis.flushall()
        qc.define_queue("bench", QueueConfig())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not otel.AVAILABLE:
        raise SystemExit("bench/tracing.py needs opentelemetry-api and -sdk (requirements-test.txt)")
    provider, exporter = sdk_provider()
    hook_of = {"off": None, "api": otel.OtelHook(), "sdk": otel.OtelHook(tracer_provider=provider)}
    folder = Path(tempfile.mkdtemp())
    port = embedded.free_port()
    proc = embedded.start(port, folder, log=folder / "redis.log")
    report = Report("tracing")
    report(f"# bench/tracing.py --items {args.items} --rounds {args.rounds}")
    report(machine_line())
    try:
        qc = QueueClient(connect(f"redis://127.0.0.1:{port}/0"))
        qc.define_queue("bench", QueueConfig())
        shapes = (("1 request of N items", False), ("N/10 one-item requests", True))
        got = {(shape, mode): [] for shape, _ in shapes for mode in MODES}
        run(qc, None, min(args.items, 2000), False)  # warm up: imports, scripts loaded
        for r in range(args.rounds):
            for shape, lean in shapes:
                modes = MODES if r % 2 == 0 else MODES[::-1]
                for mode in modes:
                    got[(shape, mode)].append(run(qc, hook_of[mode], args.items, lean))
        provider.force_flush()
        rows = []
        for shape, _ in shapes:
            base = statistics.median(w for _, w in got[(shape, "off")])
            for mode in MODES:
                sub = statistics.median(s for s, _ in got[(shape, mode)])
                per = statistics.median(w for _, w in got[(shape, mode)])
                rows.append([shape, mode, f"{per * 1e6:.1f}", f"{per / base:.2f}×", f"{sub * 1e6:.0f}"])
        report()
        report(table(["workload", "tracing", "worker CPU µs/item", "vs off", "submit CPU µs/request"], rows,
                     "llrrr"))
        report()
        report(f"spans exported in sdk mode: {exporter.count:,}")
    finally:
        provider.shutdown()
        embedded.stop(proc)


if __name__ == "__main__":
    main()
