"""The request history's retention (core/retention.py): `manage.py
queue_prune` prunes by age and by state and keeps the rest exactly, in
batches, with --dry-run counting only; bad options and bad settings are one
clear line (a CommandError, a system check), never a traceback; the
workers' upkeep pass prunes when configured, at most once per period across
workers (a Redis key), and not when not; the Requests page says how far the
history goes back. On PostgreSQL: a million rows pruned in bounded memory.
Real redis-server and database (SQLite, or PostgreSQL in bin/test's second
pass)."""
from __future__ import annotations

import io
import math
import os
import re
import resource
import threading
import time
import tracemalloc
from datetime import timedelta

import pytest
import redis as redis_lib
from django.core import checks
from django.core.management import ManagementUtility, call_command
from django.core.management.base import CommandError
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from queueadmin.core import retention
from queueadmin.core.audit import AuditEntry
from queueadmin.core.models import RequestRecord

pytestmark = pytest.mark.django_db

AGES = (1, 10, 40, 100)  # days since the request finished
LIVE = ("scheduled", "queued", "running")


def add(rid: str, state: str, days_ago: float | None, created_days_ago: float | None = None) -> None:
    now = timezone.now()
    finished = None if days_ago is None else now - timedelta(days=days_ago)
    created = now - timedelta(days=created_days_ago if created_days_ago is not None else (days_ago or 0) + 1)
    RequestRecord.objects.create(id=rid, queue="default", processor="echo", state=state, priority=0, concurrency=1,
                                 total=1, created_at=created, finished_at=finished)


@pytest.fixture
def history():
    """Every finished state at each age, live requests (old ones too), and a
    finished one without a finish time; returns their ids by (state, age)."""
    ids = {}
    for state in retention.FINISHED_STATES:
        for age in AGES:
            ids[state, age] = f"{state}-{age}"
            add(ids[state, age], state, age)
    for state in LIVE:
        ids[state, None] = f"{state}-live"
        add(ids[state, None], state, None, created_days_ago=400)
    ids["failed", "unknown"] = "failed-no-finish-time"
    add(ids["failed", "unknown"], "failed", None, created_days_ago=400)
    return ids


def left() -> set[str]:
    return set(RequestRecord.objects.values_list("id", flat=True))


def expected(history, rules: dict[str, float]) -> set[str]:
    """What pruning with `rules` must keep: everything but the rows of a
    state in `rules` that finished more than its days ago."""
    return {rid for (state, age), rid in history.items()
            if not (state in rules and isinstance(age, int) and age > rules[state])}


def run(*args, **options) -> str:
    out = io.StringIO()
    call_command("queue_prune", *args, stdout=out, **options)
    return out.getvalue()


def retention_setting(settings, value, **more):
    settings.QUEUEADMIN = {**(getattr(settings, "QUEUEADMIN", None) or {}), "HISTORY_RETENTION": value, **more}


# -- the command ---------------------------------------------------------------------------------


def test_older_than_prunes_every_finished_state_and_keeps_the_rest_exactly(history):
    out = run("--older-than", "30")
    assert left() == expected(history, dict.fromkeys(retention.FINISHED_STATES, 30))
    assert {history[s, None] for s in LIVE} <= left()  # live requests, however old, stay
    assert history["failed", "unknown"] in left()  # no finish time: no age to go by
    assert "Deleted 8 row(s) (completed 2, failed 2, cancelled 2, expired 2)" in out


def test_the_setting_prunes_per_state(history, settings):
    retention_setting(settings, {"completed": 30, "failed": 90, "cancelled": None})
    run()
    assert left() == expected(history, {"completed": 30, "failed": 90})


def test_one_number_in_the_setting_is_every_finished_state(history, settings):
    retention_setting(settings, 5)
    run()
    assert left() == expected(history, dict.fromkeys(retention.FINISHED_STATES, 5))


def test_state_limits_the_prune_to_those_states(history, settings):
    run("--state", "failed", "--state", "cancelled,expired", "--older-than", "20")
    assert left() == expected(history, {"failed": 20, "cancelled": 20, "expired": 20})
    retention_setting(settings, {"completed": 5, "failed": 5})
    run("--state", "completed")  # the setting's days for that state only
    assert left() == expected(history, {"failed": 20, "cancelled": 20, "expired": 20, "completed": 5})


def test_dry_run_counts_and_deletes_nothing(history, settings):
    before = left()
    out = run("--older-than", "30", "--dry-run")
    assert left() == before
    assert "8 row(s) would be deleted" in out and "nothing was deleted" in out
    retention_setting(settings, {"failed": 5})
    assert "Dry run: 3 row(s) would be deleted (failed 3)" in run("--dry-run")
    assert left() == before and not AuditEntry.objects.exists()


def test_nothing_is_pruned_without_a_retention(history):
    out = run()
    assert "keeps the history for ever" in out
    assert left() == set(history.values())


def test_batches_print_progress_and_leave_one_audit_entry(db):
    for n in range(11):
        add(f"old{n:02d}", "completed", 50)
    add("young", "completed", 1)
    out = run("--older-than", "7", "--batch-size", "3")
    assert left() == {"young"}
    assert [re.sub(r", [0-9.]+s\)$", ")", line.strip()) for line in out.splitlines() if "deleted" in line] == [
        "completed: deleted 3 (so far 3)", "completed: deleted 3 (so far 6)", "completed: deleted 3 (so far 9)",
        "completed: deleted 2 (so far 11)"]
    (entry,) = AuditEntry.objects.all()
    assert (entry.action, entry.count, entry.source) == ("prune_history", 11, "command")
    assert entry.who.startswith("command queue_prune") and entry.detail["deleted"] == {"completed": 11}
    run("--older-than", "7")  # nothing left to delete: no entry
    assert AuditEntry.objects.count() == 1


def test_rows_finished_at_the_same_instant_all_go_across_batches(db):
    """A batch continues where the previous one ended (PostgreSQL: from its
    latest finish time, included): rows of one instant, more than a batch
    holds, are all deleted."""
    at = timezone.now() - timedelta(days=20)
    RequestRecord.objects.bulk_create(
        RequestRecord(id=f"tie{n}", queue="default", processor="echo", state="expired", priority=0, concurrency=1,
                      created_at=at, finished_at=at + timedelta(seconds=n // 7)) for n in range(23))
    add("young", "expired", 2)
    assert "Deleted 23 row(s) (expired 23)" in run("--older-than", "10", "--batch-size", "5", "--state", "expired")
    assert left() == {"young"}


def test_a_row_that_came_back_to_life_is_not_deleted(db):
    """The DELETE checks state and age again on each row: a request retried
    between the choice of ids and the delete keeps its row."""
    add("back", "running", 50)  # finished long ago, running again (a dead letter retried)
    add("gone", "failed", 50)
    assert retention.delete_batch("failed", timezone.now() - timedelta(days=7), 10)[0] == 1
    assert left() == {"back"}


BAD_OPTIONS = [
    (["--older-than", "abc"], "--older-than 'abc': give a number of days from 0 to 36,500"),
    (["--older-than", "-1"], "--older-than '-1': give a number of days"),
    (["--older-than", "nan"], "--older-than 'nan'"),
    (["--older-than", "inf"], "--older-than 'inf'"),
    (["--older-than", "1e9"], "--older-than '1e9'"),
    (["--older-than", ""], "--older-than ''"),
    (["--batch-size", "0"], "--batch-size '0': give a whole number from 1 to 100,000"),
    (["--batch-size", "ten"], "--batch-size 'ten'"),
    (["--batch-size", "100001"], "--batch-size '100001'"),
    (["--batch-size", "-5"], "--batch-size '-5'"),
    (["--state", "done", "--older-than", "1"], ("--state 'done' is not a finished state: use completed, failed, "
                                                "cancelled, expired (a finished request whose items all succeeded "
                                                "is 'completed')")),
    (["--state", "running", "--older-than", "1"], "live requests are never pruned"),
    (["--state", ",", "--older-than", "1"], "--state names no state"),
    (["--state", "failed"], "keeps failed for ever: give --older-than DAYS"),
]


@pytest.mark.parametrize("args, message", BAD_OPTIONS)
def test_bad_options_are_a_clear_command_error(history, args, message):
    with pytest.raises(CommandError) as raised:
        run(*args)
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert left() == set(history.values())


def test_a_bad_setting_without_older_than_is_a_command_error(history, settings):
    retention_setting(settings, {"done": 30})
    with pytest.raises(CommandError, match="the key 'done' is not a finished state.*or give --older-than"):
        run()
    run("--older-than", "30", "--dry-run")  # the option does without the setting


# -- property tests: whatever the options, a clear error or a prune ------------------------------

FUZZ = hsettings(max_examples=60, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
special = st.sampled_from(["\ud800", "\x00", "\u202e", "\n", "\r", ",", "-", ".", "e", "0", "1", "9", " ", "٣",
                           "inf", "nan", "1_0", "²", "\ufeff"])
any_text = st.lists(st.one_of(special, st.characters(codec=None, categories=None)), max_size=12).map("".join)


def outcome(*args) -> str | None:
    """None when the command ran, else its error (which must be one clear line)."""
    try:
        run(*args, verbosity=0)
    except CommandError as exc:
        text = str(exc)
        assert text and "\n" not in text and "Traceback" not in text
        return text
    return None


@FUZZ
@given(value=any_text)
def test_any_older_than_is_a_number_of_days_or_a_clear_error(db, value):
    if not RequestRecord.objects.filter(id="keep-me").exists():  # once: the database outlives the examples
        add("keep-me", "failed", None)
    problem = outcome("--older-than", value, "--dry-run")
    if problem is None:
        assert 0 <= float(value.strip()) <= retention.MAX_DAYS
    else:
        assert "--older-than" in problem  # ours, or argparse's "expected one argument"
    assert left() == {"keep-me"}


@FUZZ
@given(value=any_text)
def test_any_batch_size_is_a_whole_number_or_a_clear_error(db, value):
    problem = outcome("--older-than", "1", "--batch-size", value)
    if problem is None:
        assert 1 <= int(value.strip()) <= retention.MAX_BATCH and value.strip().isascii()
    else:
        assert "--batch-size" in problem  # ours, or argparse's "expected one argument"


@FUZZ
@given(values=st.lists(st.one_of(any_text, st.sampled_from(retention.FINISHED_STATES + LIVE)), min_size=1,
                       max_size=3))
def test_any_state_is_a_finished_state_or_a_clear_error(db, values):
    args = [a for v in values for a in ("--state", v)]
    problem = outcome(*args, "--older-than", "1", "--dry-run")
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if problem is None:
        assert names and all(n in retention.FINISHED_STATES for n in names)
    else:
        assert "--state" in problem  # ours, or argparse's "expected one argument"


@FUZZ
@given(value=st.one_of(st.none(), st.booleans(), st.integers(-5, 10 ** 6), st.floats(allow_nan=True),
                       any_text, st.dictionaries(st.one_of(any_text, st.sampled_from(retention.FINISHED_STATES)),
                                                 st.one_of(st.none(), st.integers(-3, 40_000), st.floats(),
                                                           any_text), max_size=3)))
def test_any_setting_is_accepted_or_reported_by_the_system_check(settings, value):
    retention_setting(settings, value)
    errors = [m for m in checks.run_checks(tags=["queueadmin"]) if m.id == "queueadmin.E020"]
    try:
        rules = retention.parse(value)
    except retention.RetentionError:
        (error,) = errors
        assert "HISTORY_RETENTION" in error.msg and error.hint
    else:
        assert not errors
        assert set(rules) <= set(retention.FINISHED_STATES)
        assert all(0 < d <= retention.MAX_DAYS for d in rules.values())


# -- the system check ---------------------------------------------------------------------------


def check_ids(settings, **values) -> dict[str, list[str]]:
    settings.QUEUEADMIN = {**(getattr(settings, "QUEUEADMIN", None) or {}), **values}
    out: dict[str, list[str]] = {}
    for msg in checks.run_checks(tags=["queueadmin"]):
        out.setdefault(msg.id, []).append(msg.msg)
    return out


@pytest.mark.parametrize("value, message", [
    ({"done": 30}, "the key 'done' is not a finished state"),
    ({"running": 30}, "live requests are never pruned"),
    ({"failed": 0}, "HISTORY_RETENTION\"]['failed'] must be a number of days above 0, not 0"),
    ({"failed": "30"}, "must be a number of days, not str '30'"),
    (-3, "must be a number of days above 0, not -3"),
    (math.inf, "must be a number of days above 0, not inf"),
    (10 ** 6, "must be at most 36500 days"),
    ("30d", "must be None (keep for ever), a number of days, or a dict"),
    (True, "not bool"),
])
def test_a_bad_retention_setting_is_a_system_check_error(settings, value, message):
    (error,) = check_ids(settings, HISTORY_RETENTION=value)["queueadmin.E020"]
    assert message in error


@pytest.mark.parametrize("value", [None, 30, 0.5, {"completed": 30, "failed": 90}, {"expired": None}, {}])
def test_good_retention_settings_pass_the_check(settings, value):
    found = check_ids(settings, HISTORY_RETENTION=value)
    assert "queueadmin.E020" not in found and "queueadmin.E021" not in found


@pytest.mark.parametrize("value", [0, -1, "hourly", None, math.nan])
def test_a_bad_prune_period_is_a_system_check_error(settings, value):
    (error,) = check_ids(settings, HISTORY_PRUNE_SECONDS=value)["queueadmin.E021"]
    assert "HISTORY_PRUNE_SECONDS" in error


# -- the workers' upkeep -------------------------------------------------------------------------


def lock_ttl_ms(redis_url) -> int:
    r = redis_lib.Redis.from_url(redis_url)
    try:
        return r.pttl(retention.lock_key())
    finally:
        r.close()


def test_the_upkeep_prunes_nothing_when_not_configured(history, redis_url):
    assert retention.upkeep_pass() is None
    assert left() == set(history.values())
    assert lock_ttl_ms(redis_url) == -2  # not even the lock: nothing to do


def test_the_upkeep_prunes_when_configured_once_per_period_across_workers(history, redis_url, settings):
    retention_setting(settings, {"completed": 30, "expired": 5}, HISTORY_PRUNE_SECONDS=600.0)
    assert retention.upkeep_pass(by="w1") == {"completed": 2, "expired": 3}
    assert left() == expected(history, {"completed": 30, "expired": 5})
    assert 590_000 < lock_ttl_ms(redis_url) <= 600_000
    add("late", "completed", 60)
    assert retention.upkeep_pass(by="w2") is None  # pruned less than HISTORY_PRUNE_SECONDS ago
    assert "late" in left()
    redis_lib.Redis.from_url(redis_url).delete(retention.lock_key())  # the period is over
    assert retention.upkeep_pass(by="w2") == {"completed": 1, "expired": 0}
    (first, second) = AuditEntry.objects.order_by("id")
    assert (first.count, second.count, first.source) == (5, 1, "system")


def test_an_upkeep_pass_is_bounded(db, redis_url, settings, monkeypatch):
    retention_setting(settings, 1, HISTORY_PRUNE_SECONDS=1.0)
    monkeypatch.setattr(retention, "DEFAULT_BATCH", 4)
    monkeypatch.setattr(retention, "UPKEEP_BATCHES", 2)
    for n in range(20):
        add(f"old{n:02d}", "failed", 9)
    assert retention.upkeep_pass() == {"completed": 0, "failed": 8, "cancelled": 0, "expired": 0}
    assert len(left()) == 12  # the rest waits for the next pass


def test_a_bad_setting_makes_the_upkeep_prune_nothing(history, redis_url, settings, caplog):
    retention_setting(settings, {"done": 1})
    assert retention.upkeep_pass() is None
    assert left() == set(history.values())
    assert "the key 'done' is not a finished state" in caplog.text


@pytest.mark.django_db(transaction=True)  # the pruning thread writes through its own connection
def test_the_worker_thread_prunes_now_and_then(redis_url, settings, monkeypatch):
    retention_setting(settings, {"failed": 3}, HISTORY_PRUNE_SECONDS=1.0)
    monkeypatch.setattr(retention.random, "uniform", lambda a, b: 0.05)
    add("old", "failed", 5)
    add("new", "failed", 1)
    stop = threading.Event()
    thread = threading.Thread(target=retention.Pruner(stop).run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while "old" in left() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left() == {"new"}
        add("old2", "failed", 5)  # the next period's pass takes it
        deadline = time.monotonic() + 10
        while "old2" in left() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left() == {"new"}
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()


# -- the Requests page ---------------------------------------------------------------------------


def kept_line(staff) -> str:
    response = staff.get(reverse("queueadmin:requests"))
    assert response.status_code == 200
    html = response.content.decode()
    start = html.index('id="history-kept">') + len('id="history-kept">')
    return html[start:html.index("</div>", start)]


def test_the_requests_page_says_how_far_history_goes_back(staff, settings):
    assert kept_line(staff) == "History kept for ever (none yet)."
    add("r1", "completed", 1, created_days_ago=45)
    oldest = (timezone.now() - timedelta(days=45)).strftime("%Y-%m-%d")
    assert kept_line(staff) == f"History kept for ever (oldest: {oldest})."
    retention_setting(settings, {"completed": 30, "failed": 90})
    assert kept_line(staff) == (f"History kept: completed 30 days, failed 90 days, cancelled and expired for ever "
                                f"(oldest: {oldest}).")
    retention_setting(settings, 1)
    assert kept_line(staff) == f"History kept 1 day after a request finishes (oldest: {oldest})."
    retention_setting(settings, {"done": 1})
    assert "invalid" in kept_line(staff)


def test_the_line_shows_for_a_viewer_too(client, viewer, eng):
    client.force_login(viewer)
    assert kept_line(client) == "History kept for ever (none yet)."


# -- PostgreSQL: a million rows --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # each batch commits on its own, as in production
def test_a_million_rows_are_pruned_in_bounded_memory():
    """The indexes the prune does not use are dropped while the million rows
    are made and put back afterwards (kept, they triple the set-up's time);
    a DELETE in PostgreSQL leaves index entries to VACUUM, so the prune
    costs the same either way."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only (bin/test's second pass: QUEUEADMIN_TEST_DB=postgres)")
    table = RequestRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.tablename = %s AND i.indexname "
                       "NOT IN (SELECT conname FROM pg_constraint) AND i.indexname <> %s",
                       [table, "queueadmin_hist_state_fin"])
        others = cursor.fetchall()
        try:
            for name, _ in others:
                cursor.execute(f'DROP INDEX "{name}"')
            inserting = time.monotonic()
            cursor.execute(f"""
                INSERT INTO {table} (id, queue, processor, state, priority, concurrency, total, done, failed,
                                     expired, dedup_key, items_preview, created_at, finished_at)
                SELECT 'm' || g, 'default', 'echo',
                       (ARRAY['completed', 'failed', 'cancelled', 'expired'])[1 + g % 4], 0, 1, 1, 1, 0, 0, '',
                       'an item', now() - interval '41 days', now() - interval '40 days' - g * interval '1 second'
                FROM generate_series(1, 1000000) g""")
            cursor.execute(f"""
                INSERT INTO {table} (id, queue, processor, state, priority, concurrency, total, done, failed,
                                     expired, dedup_key, items_preview, created_at, finished_at)
                SELECT 'k' || g, 'default', 'echo', (ARRAY['completed', 'failed', 'running'])[1 + g % 3],
                       0, 1, 1, 1, 0, 0, '', '', now() - interval '2 days', now() - interval '1 day'
                FROM generate_series(1, 3000) g""")
            cursor.execute(f"ANALYZE {table}")
            print(f"\ninserted 1,003,000 rows in {time.monotonic() - inserting:.1f}s")
            kept = set(RequestRecord.objects.filter(id__startswith="k").values_list("id", flat=True))
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
            tracemalloc.start()
            started = time.monotonic()
            try:
                out = run("--older-than", "30")
                took = time.monotonic() - started
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            rss_growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
            lines = [line for line in out.splitlines() if "deleted" in line]
            print("\n".join(lines[:3] + ["..."] + lines[-3:]))
            print(f"pruned 1,000,000 rows in {took:.1f}s; traced peak {peak / 2**20:.2f} MiB, "
                  f"max RSS growth {rss_growth_mb:.1f} MiB")
            assert "Deleted 1,000,000 row(s) (completed 250,000, failed 250,000, cancelled 250,000, " \
                   "expired 250,000)" in out
            assert set(RequestRecord.objects.values_list("id", flat=True)) == kept
            assert peak < 8 * 2**20  # the command holds no rows: a few MiB of Python at most
            assert rss_growth_mb < 40
            assert took < 120  # about 10 s on an idle 2-core machine; the bound is for a stuck prune
        finally:
            cursor.execute(f"TRUNCATE {table}")
            for _, definition in others:
                cursor.execute(definition)


# last: Django's set-up that the command line runs binds its log handlers to this test's captured stderr
@pytest.mark.django_db(transaction=True)  # run_from_argv closes the connection on an error
def test_from_the_command_line_an_error_is_one_line_and_a_nonzero_exit(capsys):
    with pytest.raises(SystemExit) as exited:
        ManagementUtility(["manage.py", "queue_prune", "--older-than", "soon"]).execute()
    assert exited.value.code != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("CommandError: --older-than 'soon'")


# -- a real worker process prunes (its Django side starts the thread) -----------------------------


@pytest.fixture(scope="module")
def prune_db(tmp_path_factory):
    from tests.conftest import migrated_db

    return migrated_db(tmp_path_factory, "prunedb")


def sqlite_rows(path, rows=()) -> set[str]:
    """Add `rows` (id, state, days since finished) to a worker's SQLite file; the ids it holds."""
    import sqlite3

    db = sqlite3.connect(path, timeout=20)
    try:
        now = timezone.now().replace(tzinfo=None)
        with db:
            db.executemany(
                "INSERT INTO queueadmin_requestrecord (id, queue, processor, state, priority, concurrency, total, "
                "done, failed, expired, dedup_key, items_preview, created_at, finished_at) "
                "VALUES (?, 'default', 'echo', ?, 0, 1, 1, 0, 0, 0, '', '', ?, ?)",
                [(rid, state, str(now - timedelta(days=age + 1)), str(now - timedelta(days=age)))
                 for rid, state, age in rows])
        return {rid for (rid,) in db.execute("SELECT id FROM queueadmin_requestrecord")}
    finally:
        db.close()


@pytest.mark.slow
@pytest.mark.parametrize("way", ["fast path", "django command"])
def test_a_worker_process_prunes_the_history_when_configured(way, request, redis_url, prune_db, tmp_path):
    """manage.py queue_worker starts through core/launch.py when Redis knows
    the queue (the fast path), else through the Django command: both prune."""
    from queueadmin.core import clients
    from queueadmin.core.engine.config import QueueConfig

    from tests.engine_helpers import WorkerProcs

    (tmp_path / "retention_settings.py").write_text(
        "from queueadmin.settings import *  # noqa\n"
        "QUEUEADMIN = {**QUEUEADMIN, 'HISTORY_RETENTION': {'failed': 3}, 'HISTORY_PRUNE_SECONDS': 1.0}\n")
    if way == "fast path":
        clients.engine().define_queue("default", QueueConfig())
    tag = way.split()[0]
    assert {f"{tag}-old", f"{tag}-new", f"{tag}-done"} <= sqlite_rows(
        prune_db, [(f"{tag}-old", "failed", 5), (f"{tag}-new", "failed", 1), (f"{tag}-done", "completed", 50)])
    procs = WorkerProcs(redis_url, prune_db, tmp_path, DJANGO_SETTINGS_MODULE="retention_settings",
                        PYTHONPATH=os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        procs.start("default")
        deadline = time.monotonic() + 30
        while f"{tag}-old" in sqlite_rows(prune_db) and time.monotonic() < deadline:
            time.sleep(0.2)
        left_ids = sqlite_rows(prune_db)
        assert f"{tag}-old" not in left_ids, procs.logs()
        assert {f"{tag}-new", f"{tag}-done"} <= left_ids  # younger, or a state the setting keeps
        deadline = time.monotonic() + 10
        while "history retention: pruned 1 request(s) (failed 1)" not in procs.logs() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "history retention: pruned 1 request(s) (failed 1)" in procs.logs()
    finally:
        procs.stop_all()
