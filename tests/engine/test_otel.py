"""OpenTelemetry (core/engine/integrations/otel.py): traces collected with the
SDK's in-memory exporter, from the submit (inside a caller's span: a script,
a Django Tasks `.enqueue()`) to each item's run on an in-process worker:
parents, attributes, the processor's own spans, exceptions, retry and
dead-letter events, lease renewals; and nothing kept when no hook is
installed. Each test has a TracerProvider of its own, given to the hook (the
global one can be set once per process)."""
from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402
from queueadmin.core.engine import hooks  # noqa: E402
from queueadmin.core.engine.config import QueueConfig  # noqa: E402
from queueadmin.core.engine.integrations import otel  # noqa: E402
from queueadmin.core.engine.runtime.item import Item, Ran  # noqa: E402
from queueadmin.core.engine.runtime.processors import Processors  # noqa: E402
from queueadmin.core.engine.runtime.worker import Worker  # noqa: E402

from tests.engine_helpers import ALL_PROCESSORS, burst  # noqa: E402

SEEN_CONTEXT = []  # (trace id, span id) current inside `current_span`, in the worker's thread


def current_span(item):
    """A processor that notes the span current while it runs."""
    ctx = trace.get_current_span().get_span_context()
    SEEN_CONTEXT.append((ctx.trace_id, ctx.span_id))
    return item


async def current_span_async(item):
    return current_span(item)


PROCESSORS = {**ALL_PROCESSORS, "current_span": "tests.engine.test_otel.current_span",
              "current_span_async": "tests.engine.test_otel.current_span_async"}


@pytest.fixture
def traced():
    """An OtelHook installed with a provider of this test's, and its exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    hook = otel.OtelHook(tracer_provider=provider)
    hooks.install(hook)
    SEEN_CONTEXT.clear()
    yield provider, exporter
    hooks.uninstall(hook)
    provider.shutdown()


def spans(exporter, kind=None, name_prefix=""):
    return [s for s in exporter.get_finished_spans()
            if (kind is None or s.kind == kind) and s.name.startswith(name_prefix)]


def events(span):
    return [e.name for e in span.events]


def run_worker(qc, queues=("default",), **kwargs) -> Worker:
    kwargs.setdefault("install_signals", False)
    kwargs.setdefault("threads", 1)
    w = Worker(qc, list(queues), Processors(PROCESSORS), burst=True, **kwargs)
    w.work()
    return w


def test_a_submit_inside_a_span_and_its_items_runs_are_one_trace(qc, r, traced):
    provider, exporter = traced
    caller = provider.get_tracer("test")
    with caller.start_as_current_span("caller") as parent:
        rid = qc.submit("default", "current_span", ["a", "b", "c"]).id
    headers = r.hget(qc.keys.request(rid).meta, "headers")
    assert headers and "traceparent" in headers  # kept with the request
    assert hooks.HOOKS.wants_headers

    w = run_worker(qc)
    [submit] = spans(exporter, SpanKind.PRODUCER)
    runs = spans(exporter, SpanKind.CONSUMER)
    trace_id = parent.get_span_context().trace_id
    assert submit.name == "queueadmin submit default"
    assert submit.context.trace_id == trace_id and submit.parent.span_id == parent.get_span_context().span_id
    assert submit.attributes["messaging.destination.name"] == "default"
    assert submit.attributes["queueadmin.processor"] == "current_span"

    assert len(runs) == 3  # one per item
    assert sorted(s.attributes["queueadmin.item.index"] for s in runs) == [0, 1, 2]
    for span in runs:
        assert span.name == "queueadmin run current_span"
        assert span.context.trace_id == trace_id
        assert span.parent.span_id == submit.context.span_id
        a = span.attributes
        assert (a["messaging.system"], a["messaging.destination.name"], a["messaging.operation.type"]) == (
            "queueadmin", "default", "process")
        assert (a["queueadmin.processor"], a["queueadmin.request_id"], a["queueadmin.item.attempt"]) == (
            "current_span", rid, 1)
        assert a["queueadmin.worker"] == w.id
        assert a["queueadmin.outcome"] == "done"
        assert span.status.status_code == StatusCode.UNSET
    # the run's span is current while the processor runs: spans it makes are children
    assert sorted(SEEN_CONTEXT) == sorted((s.context.trace_id, s.context.span_id) for s in runs)
    assert qc.status(rid)["state"] == "completed"


def test_a_one_item_request_and_an_async_processor_are_traced_too(qc, traced):
    provider, exporter = traced
    with provider.get_tracer("test").start_as_current_span("caller") as parent:
        one = qc.submit("default", "current_span_async", [1]).id  # the lean layout
    w = run_worker(qc)
    [run] = spans(exporter, SpanKind.CONSUMER)
    assert run.context.trace_id == parent.get_span_context().trace_id
    assert run.attributes["queueadmin.request_id"] == one
    assert run.attributes["queueadmin.worker"] == w.id  # from the event loop's thread
    assert SEEN_CONTEXT == [(run.context.trace_id, run.context.span_id)]


def test_a_failing_item_records_its_exception_its_retries_and_its_dead_letter(qc, traced):
    provider, exporter = traced
    qc.define_queue("twice", QueueConfig(max_attempts=2, backoff_seconds=0.01))
    with provider.get_tracer("test").start_as_current_span("caller") as parent:
        rid = qc.submit("twice", "fail", ["boom"]).id
    burst(qc, queues=("twice",))
    runs = sorted(spans(exporter, SpanKind.CONSUMER), key=lambda s: s.attributes["queueadmin.item.attempt"])
    assert [s.attributes["queueadmin.item.attempt"] for s in runs] == [1, 2]  # a span per attempt
    assert {s.context.trace_id for s in runs} == {parent.get_span_context().trace_id}
    first, last = runs
    for span in runs:
        assert span.status.status_code == StatusCode.ERROR
        [exc] = [e for e in span.events if e.name == "exception"]
        assert exc.attributes["exception.type"] == "RuntimeError"
        assert "always fails" in exc.attributes["exception.message"]
    assert events(first) == ["exception", "retry scheduled"]
    assert first.attributes["queueadmin.outcome"] == "retry"
    assert events(last) == ["exception", "dead-lettered"]
    assert last.attributes["queueadmin.outcome"] == "dead"
    assert "RuntimeError" in last.events[-1].attributes["error"]
    assert qc.status(rid)["state"] == "failed"


def test_an_item_judged_without_a_run_still_gets_its_span(traced):
    """An item that failed before its processor ran (stopped while waiting,
    a payload that cannot be opened) has its span made at its outcome."""
    provider, exporter = traced
    [hook] = [h for h in hooks.HOOKS.installed() if isinstance(h, otel.OtelHook)]
    headers = {}
    with provider.get_tracer("test").start_as_current_span("caller") as parent:
        hook.submitting("q", "p", headers)
    item = Item("q", "token", "rid1", "entry", 0, "1", 3, "p", headers=headers, worker="w1")
    hook.outcome(item, "dead", Ran(item, error="ValueError: cannot be opened", exc=ValueError("cannot be opened")))
    [run] = spans(exporter, SpanKind.CONSUMER)
    assert run.context.trace_id == parent.get_span_context().trace_id
    assert run.status.status_code == StatusCode.ERROR
    assert events(run) == ["exception", "dead-lettered"]
    assert (run.attributes["queueadmin.worker"], run.attributes["queueadmin.item.attempt"]) == ("w1", 3)


def test_lease_renewals_are_events_of_the_running_span(qc, traced):
    _, exporter = traced
    qc.define_queue("short", QueueConfig(lease_seconds=0.6))
    qc.submit("short", "sleep", [1.0])
    burst(qc, queues=("short",))
    [run] = spans(exporter, SpanKind.CONSUMER)
    renewals = [e for e in run.events if e.name == "lease renewed"]
    assert renewals and renewals[0].attributes["lease_seconds"] == 0.6
    assert renewals[0].attributes["held"] is True
    assert run.attributes["queueadmin.outcome"] == "done"


def test_a_request_submitted_outside_any_span_starts_its_own_trace(qc, traced):
    _, exporter = traced
    qc.submit("default", "echo", ["a", "b"])
    burst(qc)
    [submit] = spans(exporter, SpanKind.PRODUCER)
    runs = spans(exporter, SpanKind.CONSUMER)
    assert submit.parent is None
    assert len(runs) == 2 and all(s.parent.span_id == submit.context.span_id for s in runs)


def test_without_the_hook_no_headers_are_kept(qc, r):
    assert not any(isinstance(h, otel.OtelHook) for h in hooks.HOOKS.installed())
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("test").start_as_current_span("caller"):
        rid = qc.submit("default", "echo", ["a"]).id
    assert r.hget(qc.keys.request(rid).meta, "headers") is None
    burst(qc)
    assert [s.name for s in exporter.get_finished_spans()] == ["caller"]


def test_the_api_alone_keeps_no_headers(qc, r):
    """A hook whose provider makes no recording spans (the API without an
    SDK) keeps nothing with the request, and the items run as usual."""
    hook = otel.OtelHook(tracer_provider=trace.NoOpTracerProvider())
    hooks.install(hook)
    try:
        rid = qc.submit("default", "uppercase", ["a", "b"]).id
        assert r.hget(qc.keys.request(rid).meta, "headers") is None
        assert not hooks.HOOKS.wants_headers  # and workers read none (no round trip for them)
        burst(qc)
    finally:
        hooks.uninstall(hook)
    assert [x["result"] for x in qc.results(rid)] == ["A", "B"]


def test_install_if_available_follows_the_setting():
    try:
        assert otel.install_if_available(False) is None
        assert otel.install_if_available("off") is None
        hook = otel.install_if_available(True)
        assert isinstance(hook, otel.OtelHook) and hook in hooks.HOOKS.installed()
        assert otel.install_if_available(True) is hook  # once per process
        assert hooks.HOOKS.installed().count(hook) == 1
    finally:
        otel.uninstall()
    assert not any(isinstance(h, otel.OtelHook) for h in hooks.HOOKS.installed())


def test_without_opentelemetry_nothing_is_installed_and_submit_and_run_work(redis_url):
    """opentelemetry not importable (as in a project without it): a process
    of its own, where the package is hidden before anything imports it."""
    import subprocess
    import sys

    from tests.engine_helpers import ROOT

    code = f"""
import sys
sys.modules["opentelemetry"] = None  # import opentelemetry raises ImportError
sys.path.insert(0, {str(ROOT)!r})
from queueadmin.core.engine import hooks
from queueadmin.core.engine.client.queue_client import QueueClient
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.integrations import otel
from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.worker import Worker
from queueadmin.core.engine.store.connection import connect
assert not otel.AVAILABLE and otel.install_if_available(True) is None and not hooks.HOOKS.active
qc = QueueClient(connect({redis_url!r}), prefix="nootel")
qc.define_queue("default", QueueConfig())
rid = qc.submit("default", "echo", ["a", "b"]).id
Worker(qc, ["default"], Processors({{"echo": "queueadmin.core.engine.runtime.processors.echo"}}), burst=True,
       install_signals=False, threads=1).work()
assert [r["result"] for r in qc.results(rid)] == ["a", "b"]
assert "opentelemetry.trace" not in sys.modules
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_the_app_installs_it_unless_the_setting_says_false(settings):
    from django.apps import apps

    app = apps.get_app_config("queueadmin")
    try:
        settings.QUEUEADMIN = {**settings.QUEUEADMIN, "OPENTELEMETRY": False}
        app.ready()
        assert not any(isinstance(h, otel.OtelHook) for h in hooks.HOOKS.installed())
        settings.QUEUEADMIN = {k: v for k, v in settings.QUEUEADMIN.items() if k != "OPENTELEMETRY"}
        app.ready()
        assert any(isinstance(h, otel.OtelHook) for h in hooks.HOOKS.installed())
    finally:
        otel.uninstall()


# -- Django Tasks ------------------------------------------------------------------


@pytest.mark.django_db
def test_a_django_tasks_enqueue_inside_a_span_joins_its_trace(settings, redis_url, traced):
    from queueadmin.core import conf, services

    from tests.taskapp import tasks

    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "PROCESSORS": dict(settings.QUEUEADMIN["PROCESSORS"])}
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "tests.taskapp"]
    otel.uninstall()  # the app's own (its ready() ran again), whose spans go to the global provider
    services.reset()
    client = services.engine()
    client.define_queue("default", QueueConfig())
    provider, exporter = traced
    with provider.get_tracer("test").start_as_current_span("view") as parent:
        result = tasks.add.enqueue(2, 3)
    [submit] = spans(exporter, SpanKind.PRODUCER)
    assert submit.parent.span_id == parent.get_span_context().span_id
    assert submit.attributes["queueadmin.processor"] == "task:tests.taskapp.tasks.add"

    w = Worker(client, ["default"], Processors(conf.processors()), burst=True, install_signals=False, threads=1)
    w.work()
    [run] = spans(exporter, SpanKind.CONSUMER)
    assert run.context.trace_id == parent.get_span_context().trace_id
    assert run.parent.span_id == submit.context.span_id
    assert run.attributes["queueadmin.request_id"] == result.id
    assert tasks.add.get_result(result.id).return_value == 5


@pytest.mark.django_db
def test_a_request_submitted_through_the_api_inside_a_span_joins_its_trace(api, engine, traced):
    """As with opentelemetry-instrumentation-django, whose span for the web
    request is current while the view runs (the test client runs it in this
    thread): the submit span is its child, the runs continue it."""
    from tests.api_helpers import run_burst

    provider, exporter = traced
    with provider.get_tracer("test").start_as_current_span("POST /api/v1/requests") as http:
        answer = api.post("/api/v1/requests", {"queue": "default", "processor": "uppercase", "items": ["a", "b"]})
    assert answer.status_code in (200, 201), answer.content
    run_burst()
    [submit] = spans(exporter, SpanKind.PRODUCER)
    runs = spans(exporter, SpanKind.CONSUMER)
    assert submit.parent.span_id == http.get_span_context().span_id
    assert len(runs) == 2
    assert all(s.context.trace_id == http.get_span_context().trace_id for s in runs)
    assert all(s.parent.span_id == submit.context.span_id for s in runs)
    assert {s.attributes["queueadmin.request_id"] for s in runs} == {answer.json()["id"]}


# -- a real worker process -----------------------------------------------------------


@pytest.mark.parametrize("processes", [1, 2])
def test_a_real_worker_process_continues_the_trace(qc, traced, redis_url, worker_db, tmp_path, processes):
    """`manage.py queue_worker` whose settings set the SDK up (tests/otel_settings.py,
    its spans to a file): its runs are children of this process's submit span;
    a pool's forked children too."""
    import json

    from tests.engine_helpers import WorkerProcs

    provider, exporter = traced
    spans_file = tmp_path / "spans.jsonl"
    procs = WorkerProcs(redis_url, worker_db, tmp_path, DJANGO_SETTINGS_MODULE="tests.otel_settings",
                        QUEUEADMIN_TEST_SPANS=str(spans_file))
    qc.define_queue("twice", QueueConfig(max_attempts=2, backoff_seconds=0.01))
    with provider.get_tracer("test").start_as_current_span("caller") as parent:
        ok = qc.submit("default", "echo", ["a", "b"]).id
        bad = qc.submit("twice", "fail", ["x"]).id
    try:
        proc = procs.start("default,twice", processes=processes, burst=True)
        assert proc.wait(timeout=90) == 0, procs.logs()
    finally:
        procs.stop_all()
    submits = {s.attributes["messaging.destination.name"]: s for s in spans(exporter, SpanKind.PRODUCER)}
    runs = [json.loads(line) for line in spans_file.read_text().splitlines()]
    runs = [s for s in runs if s["name"].startswith("queueadmin run")]
    trace_id = f"0x{parent.get_span_context().trace_id:032x}"
    assert len(runs) == 4  # two items, and two attempts of the failing one
    for span in runs:
        a = span["attributes"]
        submit = submits[a["messaging.destination.name"]]
        assert span["context"]["trace_id"] == trace_id
        assert span["parent_id"] == f"0x{submit.context.span_id:016x}"
        assert span["kind"] == "SpanKind.CONSUMER"
        pid = int(a["queueadmin.worker"].split(":")[1])
        assert pid == proc.pid if processes == 1 else pid != proc.pid
    by_rid = {}
    for span in runs:
        by_rid.setdefault(span["attributes"]["queueadmin.request_id"], []).append(span)
    assert sorted(s["attributes"]["queueadmin.item.index"] for s in by_rid[ok]) == [0, 1]
    assert all(s["attributes"]["queueadmin.outcome"] == "done" for s in by_rid[ok])
    failed = sorted(by_rid[bad], key=lambda s: s["attributes"]["queueadmin.item.attempt"])
    assert [s["attributes"]["queueadmin.outcome"] for s in failed] == ["retry", "dead"]
    assert [e["name"] for e in failed[-1]["events"]] == ["exception", "dead-lettered"]
    assert failed[-1]["status"]["status_code"] == "ERROR"
