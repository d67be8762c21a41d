"""Sentry (core/engine/integrations/sentry.py) on real workers and a real
Redis, with sentry-sdk set up as an application would, its envelopes caught
by a local transport: an item's failure reported once per attempt policy
(each attempt only when asked), tagged; retries that succeed and cancelled
runs are no errors; periodic requests open and close cron
check-ins under their monitor slug; nothing is installed without Sentry."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from queueadmin.core import launch
from queueadmin.core.engine import hooks
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.features import periodic
from queueadmin.core.engine.features.periodic import Definition
from queueadmin.core.engine.integrations import sentry
from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.worker import Worker

from tests.engine_helpers import ALL_PROCESSORS, Threads, burst, wait_for

sentry_sdk = pytest.importorskip("sentry_sdk")
Transport = pytest.importorskip("sentry_sdk.transport").Transport


class Recording(Transport):
    """Keeps every envelope instead of sending it."""

    def __init__(self, options=None):
        super().__init__(options)
        self.envelopes = []
        self.lock = threading.Lock()

    def capture_envelope(self, envelope):
        with self.lock:
            self.envelopes.append(envelope)

    def payloads(self, kind: str) -> list[dict]:
        with self.lock:
            return [item.payload.json for env in self.envelopes for item in env.items if item.type == kind]

    def events(self) -> list[dict]:
        return self.payloads("event")

    def checkins(self) -> list[dict]:
        return self.payloads("check_in")


def _reset_sentry():
    sentry_sdk.get_client().close()
    sentry_sdk.get_global_scope().set_client(None)


@pytest.fixture
def transport():
    """sentry-sdk set up as an application does (its default integrations
    too), sending to the Recording transport."""
    recording = Recording()
    sentry_sdk.init(dsn="http://public@127.0.0.1:1/1", transport=recording, auto_enabling_integrations=False)
    yield recording
    _reset_sentry()


@pytest.fixture
def install():
    """install(setting) -> the hook, as a worker process installs it; removed after."""
    def do(setting=None):
        return sentry.install_if_available(setting)

    yield do
    sentry.uninstall()
    assert not hooks.HOOKS.active


def capture_inside(item):
    """A processor that reports something itself, and fails when asked."""
    sentry_sdk.capture_message(f"inside {item}")
    if item == "boom":
        raise KeyError(item)
    return item


# -- items -------------------------------------------------------------------------


def test_an_item_that_fails_every_attempt_is_reported_once_tagged_with_its_stack(qc, transport, install):
    install({"dashboard_url": "https://ops.example.com/queues/"})
    qc.define_queue("three", QueueConfig(max_attempts=3, backoff_seconds=0.01))
    rid = qc.submit("three", "fail", ["x"]).id
    burst(qc, queues=("three",))
    assert [r["status"] for r in qc.results(rid)] == ["failed"]
    event, = transport.events()
    assert {k: event["tags"][k] for k in ("queue", "processor", "request_id", "item", "attempt", "outcome")} == {
        "queue": "three", "processor": "fail", "request_id": rid, "item": "0", "attempt": "3", "outcome": "dead"}
    exc = event["exception"]["values"][-1]
    assert exc["type"] == "RuntimeError" and "fail processor always fails" in exc["value"]
    assert any(f["function"] == "fail" for f in exc["stacktrace"]["frames"])  # the processor's own frame
    context = event["contexts"]["queueadmin"]
    assert context["url"] == f"https://ops.example.com/queues/requests/{rid}/items/0/"
    assert (context["attempt"], context["outcome"]) == (3, "dead")
    assert event["fingerprint"] == ["{{ default }}", "queueadmin", "three", "fail"]


def test_with_report_every_each_failed_attempt_is_reported(qc, transport, install):
    install({"report": "every", "grouping": "item"})
    qc.define_queue("three", QueueConfig(max_attempts=3, backoff_seconds=0.01))
    rid = qc.submit("three", "fail", ["x"]).id
    burst(qc, queues=("three",))
    events = transport.events()
    assert [(e["tags"]["attempt"], e["tags"]["outcome"]) for e in events] == [
        ("1", "retry"), ("2", "retry"), ("3", "dead")]
    assert {tuple(e["fingerprint"]) for e in events} == {("queueadmin", "three", "fail", rid, "0")}  # one issue


def test_a_retry_that_succeeds_is_no_error(qc, transport, install):
    install()
    rid = qc.submit("fast", "fail_until_third", ["x"]).id  # fails twice, succeeds on its third attempt
    burst(qc, queues=("fast",))
    assert qc.status(rid)["state"] == "completed"
    assert transport.events() == []


def test_a_cancelled_run_is_no_error(qc, transport, install):
    install({"report": "every"})
    rid = qc.submit("default", "sleep", [30, 30]).id
    started = time.monotonic()
    with Threads(qc, 1):
        wait_for(lambda: qc.status(rid)["in_flight"] == 1)
        qc.cancel(rid)
    assert time.monotonic() - started < 15
    assert qc.status(rid)["state"] == "cancelled"
    assert transport.events() == []


def test_a_run_stopped_at_its_time_limit_is_reported_as_a_message(qc, transport, install):
    install()
    qc.define_queue("once", QueueConfig(max_attempts=1))
    rid = qc.submit("once", "sleep", [30], time_limit=0.3).id
    burst(qc, queues=("once",))
    event, = transport.events()
    assert "TimeLimitExceeded" in event["message"] and event["level"] == "error"
    assert (event["tags"]["request_id"], event["tags"]["outcome"]) == (rid, "dead")


def test_what_a_processor_captures_itself_carries_the_items_tags(qc, transport, install):
    install()
    qc.define_queue("once", QueueConfig(max_attempts=1))
    rid = qc.submit("once", "capture_inside", ["fine", "boom"]).id
    w = Worker(qc, ["once"], Processors({**ALL_PROCESSORS, "capture_inside": f"{__name__}.capture_inside"}),
               burst=True, install_signals=False, threads=1)
    w.work()
    sentry_sdk.capture_message("outside any item")
    events = {e.get("message") or e["exception"]["values"][-1]["type"]: e for e in transport.events()}
    assert set(events) == {"inside fine", "inside boom", "KeyError", "outside any item"}
    for key, index in (("inside fine", "0"), ("inside boom", "1"), ("KeyError", "1")):
        tags = events[key]["tags"]
        assert (tags["queue"], tags["processor"], tags["request_id"], tags["item"]) == (
            "once", "capture_inside", rid, index)
    assert "request_id" not in events["outside any item"].get("tags", {})  # the item's scope did not leak


# -- periodic requests: cron check-ins ------------------------------------------------------


def every(seconds=1, name="Nightly Report", **kw) -> Definition:
    return Definition(name=name, queue=kw.pop("queue", "default"), processor=kw.pop("processor", "echo"),
                      items=["a"], interval=seconds, **kw)


def fire_by_a_worker(qc, d: Definition, queues=("default",)) -> str:
    """Publish `d`, wait for its next due time, let a burst worker fire and run it."""
    periodic.define(qc, d)
    nxt = periodic.next_runs(qc, [d.name])[d.name]
    time.sleep(max(0.0, nxt / 1000 - time.time()) + 0.05)
    burst(qc, queues=queues)
    return periodic.last_runs(qc, [d.name])[d.name]["request"]


def test_a_periodic_request_that_completes_checks_in_then_ok(qc, transport, install):
    install()
    rid = fire_by_a_worker(qc, every(1))
    assert qc.status(rid)["state"] == "completed"
    checkins = transport.checkins()
    assert [c["status"] for c in checkins] == ["in_progress", "ok"]
    assert {c["monitor_slug"] for c in checkins} == {"nightly-report"}
    assert checkins[0]["check_in_id"] == checkins[1]["check_in_id"] == sentry.check_in_id(rid)
    assert checkins[0]["monitor_config"] == {"schedule": {"type": "interval", "value": 1, "unit": "minute"},
                                             "timezone": "UTC"}
    assert checkins[1]["duration"] >= 0
    assert transport.events() == []


def test_a_periodic_request_that_fails_checks_in_then_error(qc, transport, install):
    install({"monitor_config": {"checkin_margin": 5}})
    qc.define_queue("once", QueueConfig(max_attempts=1))
    rid = fire_by_a_worker(qc, every(1, name="sync", queue="once", processor="fail"), queues=("once",))
    assert qc.status(rid)["state"] == "failed"
    checkins = transport.checkins()
    assert [(c["status"], c["monitor_slug"], c["check_in_id"]) for c in checkins] == [
        ("in_progress", "sync", sentry.check_in_id(rid)), ("error", "sync", sentry.check_in_id(rid))]
    assert checkins[0]["monitor_config"]["checkin_margin"] == 5
    event, = transport.events()  # the item, reported once
    assert event["tags"]["request_id"] == rid


def test_a_fire_that_stands_for_missed_due_times_says_so(qc, transport, install):
    install()
    d = every(60, name="hourly-ish")
    periodic.define(qc, d)
    now = periodic.server_ms(qc)
    qc.redis.zadd(qc.keys.periodic.due, {d.name: now - 300_000})  # the workers were down for five minutes
    burst(qc)
    checkins = transport.checkins()
    opened = [c for c in checkins if c["status"] == "in_progress"]
    assert len(opened) == 2  # one request for the missed times, one for the due time within the grace
    assert sorted(c["check_in_id"] for c in checkins if c["status"] == "ok") == sorted(
        c["check_in_id"] for c in opened)
    warning, = transport.events()
    assert warning["level"] == "warning" and "missed" in warning["message"]
    assert warning["tags"]["monitor.slug"] == "hourly-ish"


def test_a_cancelled_periodic_request_closes_its_check_in_with_error(qc, transport, install):
    install()
    d = every(1, name="slow", processor="sleep")
    d = Definition(**{**d.__dict__, "items": [30]})
    periodic.define(qc, d)
    nxt = periodic.next_runs(qc, [d.name])[d.name]
    time.sleep(max(0.0, nxt / 1000 - time.time()) + 0.05)
    periodic.run(qc)  # fired by this process's upkeep, as a worker's would
    rid = periodic.last_runs(qc, [d.name])[d.name]["request"]
    qc.cancel(rid)
    assert [(c["status"], c["check_in_id"]) for c in transport.checkins()] == [
        ("in_progress", sentry.check_in_id(rid)), ("error", sentry.check_in_id(rid))]


def test_monitor_slugs_and_schedules():
    assert sentry.monitor_slug("Nightly Report") == "nightly-report"
    assert sentry.monitor_slug("  a/b__c  ") == "a-b__c"
    long = sentry.monitor_slug("x" * 80)
    assert len(long) == sentry.SLUG_MAX and long != sentry.monitor_slug("x" * 81)
    cron = Definition(name="n", queue="default", processor="echo", items=["x"], cron="0 9 * * 1-5",
                      tz="Europe/Berlin")
    assert sentry.monitor_config(cron) == {"schedule": {"type": "crontab", "value": "0 9 * * 1-5"},
                                           "timezone": "Europe/Berlin"}
    seconds = Definition(name="n", queue="default", processor="echo", items=["x"], cron="* * * * * */5")
    assert sentry.monitor_config(seconds)["schedule"]["value"] == "* * * * *"
    for interval, schedule in ((30, (1, "minute")), (90, (2, "minute")), (7200, (2, "hour")),
                               (86400, (1, "day")), (3660, (61, "minute"))):
        got = sentry.monitor_config(every(interval))["schedule"]
        assert (got["value"], got["unit"]) == schedule, interval


# -- installing ------------------------------------------------------------------------------


def test_without_sentry_configured_nothing_is_installed(install):
    _reset_sentry()
    assert not sentry.configured()
    assert install() is None and not hooks.HOOKS.active


def test_a_setting_of_false_turns_it_off(transport, install):
    assert install(False) is None and not hooks.HOOKS.active


def test_a_worker_process_installs_it_at_start(transport, install):
    opts = SimpleNamespace(burst=True, threads=1, async_tasks=10, time_limit_grace=5.0, max_items_per_process=0,
                           max_memory_per_process=0)
    values = {"HEARTBEAT_SECONDS": 1.0, "DEAD_AFTER_SECONDS": 10.0, "AGING_SECONDS": None, "SENTRY": {}}
    launch.worker_options(opts, values)
    hook, = [h for h in hooks.HOOKS.installed() if isinstance(h, sentry.SentryHook)]
    assert launch.worker_options(opts, values) and hooks.HOOKS.installed().count(hook) == 1  # once per process
