"""The operator commands (queue_submit, queue_status, queue_results) against
a real redis-server: output formats, and a one-line error with a non-zero
exit for every kind of bad input."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from queueadmin.core import conf
from queueadmin.core import embedded, services
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.store.keys import Keys
from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.worker import Worker
from queueadmin.core.models import RequestRecord

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "qa"


def run(*args, stdin=None, **options) -> list[str]:
    out = io.StringIO()
    if stdin is not None:
        options["stdin"] = io.StringIO(stdin)
    call_command(*args, stdout=out, **options)
    return out.getvalue().splitlines()


def submit(text: str, **options) -> tuple[str, list[str]]:
    options.setdefault("processor", "uppercase")
    lines = run("queue_submit", "-", stdin=text, **options)
    return lines[-1], lines


def burst():
    """Run an in-process worker until nothing is left to do."""
    from django.conf import settings

    Worker(services.engine(), ["default"], Processors(conf.processors()), burst=True,
           install_signals=False).work()


def take(rid: str) -> tuple[str, int, object]:
    """Claim a token and take one item as a worker would (via the Lua scripts)."""
    client = services.engine()
    qk, rk = client.keys.queue("default"), client.keys.request(rid)
    client.scripts("cycle", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked, qk.wake, qk.config,
                             qk.lastserved, qk.rate, qk.ratelog, qk.needs,
                             qk.groups, qk.glimits, qk.gheld, qk.packed, qk.lane, qk.tomb], ["test-worker", 60_000, 1, 0])
    got = client.scripts("take", rk.all(), ["test-worker", 60_000, 3, 60_000, "", 1])
    assert len(got) == 11, got  # header of seven, then one item
    return got[7], int(got[8]), json.loads(got[9])


def ack(rid: str, entry: str, index: int, outcome: str, **record) -> None:
    record = {"attempts": 1, "worker": "test-worker", "started_at": time.time(), "finished_at": time.time(),
              **record}
    services.engine().scripts("ack", services.engine().keys.request(rid).all(),
                              ["test-worker", 60_000, "", entry, index, outcome, json.dumps(record), 0, ""])


def complete_out_of_order(rid: str, count: int) -> None:
    """Run `count` items without a worker, acknowledging them in reverse order."""
    taken = [take(rid) for _ in range(count)]
    for entry, index, payload in reversed(taken):
        ack(rid, entry, index, "done", status="done", result=f"r{payload}")


# -- queue_submit -------------------------------------------------------------------


@pytest.mark.django_db
def test_submit_from_file_prints_id_last_and_records_request(redis_url, tmp_path):
    path = tmp_path / "items.txt"
    path.write_text("alpha\nbeta gamma\n\ndelta\n")
    lines = run("queue_submit", str(path), queue="default", processor="uppercase", priority=70, concurrency=2)
    rid = lines[-1]
    st = services.engine().status(rid)
    assert st["total"] == 4 and st["priority"] == 70 and st["concurrency"] == 2
    assert st["processor"] == "uppercase" and st["state"] == "queued"
    items = services.engine().items(rid)
    assert [i["payload"] for i in items] == ["alpha", "beta gamma", "", "delta"]  # empty middle line kept
    record = RequestRecord.objects.get(id=rid)
    assert record.total == 4 and record.queue == "default" and "alpha" in record.items_preview


@pytest.mark.django_db
def test_submit_from_stdin_strips_newlines(redis_url):
    rid, _ = submit("one\r\ntwo\nthree")  # CRLF stripped, no final newline needed
    assert [i["payload"] for i in services.engine().items(rid)] == ["one", "two", "three"]


@pytest.mark.django_db
def test_submit_json_lines(redis_url):
    rid, _ = submit('{"a": 1}\n[1, 2]\n"text"\n', processor="echo", json=True)
    assert [i["payload"] for i in services.engine().items(rid)] == [{"a": 1}, [1, 2], "text"]
    with pytest.raises(CommandError, match="line 2 is not JSON"):
        submit('1\nnot json\n', processor="echo", json=True)


@pytest.mark.django_db
def test_duplicate_submission_returns_existing_request(redis_url):
    rid, first = submit("x\ny\n")
    assert "duplicate" not in "\n".join(first)
    again, lines = submit("x\ny\n")
    assert again == rid
    assert lines[-2] == "duplicate of an existing request"
    other, _ = submit("x\ny\n", no_dedup=True)
    assert other != rid
    keyed, _ = submit("p\n", dedup_key="k1")
    same, lines = submit("q\n", dedup_key="k1")
    assert same == keyed and lines[-2] == "duplicate of an existing request"


@pytest.mark.django_db
def test_delayed_and_expiring_submission(redis_url):
    rid, lines = submit("later\n", delay=30, expires_in=60)
    st = services.engine().status(rid)
    assert st["state"] == "scheduled"
    assert st["not_before"] > time.time() + 25 and st["expires_at"] > st["not_before"]
    assert "scheduled" in lines[0]


@pytest.mark.django_db
def test_large_file(redis_url, tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("".join(f"item {i}\n" for i in range(100_000)))
    started = time.monotonic()
    rid = run("queue_submit", str(path), processor="sha256")[-1]
    assert time.monotonic() - started < 60
    assert services.engine().status(rid)["total"] == 100_000
    assert services.engine().items(rid, start=99_999, count=1)[0]["payload"] == "item 99999"


@pytest.mark.django_db
@pytest.mark.parametrize("options, message", [
    ({"queue": "nope"}, "unknown queue 'nope'"),
    ({"processor": "nope"}, "unknown processor 'nope'"),
    ({"priority": 100}, "priority must be an integer between 0 and 99"),
    ({"priority": -1}, "priority must be an integer between 0 and 99"),
    ({"concurrency": 0}, "concurrency must be an integer"),
    ({"delay": -5}, "delay must be between"),
    ({"dedup_key": "k", "no_dedup": True}, "exclude each other"),
])
def test_submit_bad_options(redis_url, options, message):
    with pytest.raises(CommandError, match=message):
        submit("a\n", **options)


@pytest.mark.django_db
def test_submit_bad_files(redis_url, tmp_path):
    with pytest.raises(CommandError, match="No such file"):
        run("queue_submit", str(tmp_path / "missing.txt"), processor="echo")
    with pytest.raises(CommandError, match="Is a directory"):
        run("queue_submit", str(tmp_path), processor="echo")
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00bad\n")
    with pytest.raises(CommandError, match="not valid UTF-8"):
        run("queue_submit", str(binary), processor="echo")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(CommandError, match="has no items"):
        run("queue_submit", str(empty), processor="echo")


# -- queue_status -----------------------------------------------------------------


@pytest.mark.django_db
def test_status_of_a_request_text_and_json(redis_url):
    rid, _ = submit("a\nb\nc\n", priority=80, concurrency=3)
    text = dict(line.split(":", 1) for line in run("queue_status", rid))
    text = {k.strip(): v.strip() for k, v in text.items()}
    assert text["id"] == rid and text["queue"] == "default" and text["processor"] == "uppercase"
    assert text["state"] == "queued" and text["priority"] == "80" and text["concurrency"] == "3"
    assert text["total"] == "3" and text["done"] == "0" and text["failed"] == "0" and text["in_flight"] == "0"

    data = json.loads("\n".join(run("queue_status", rid, json=True)))
    for key in ("id", "queue", "processor", "state", "priority", "concurrency", "total", "done", "failed",
                "in_flight"):
        assert key in data
    assert (data["id"], data["state"], data["total"], data["priority"]) == (rid, "queued", 3, 80)

    burst()
    data = json.loads("\n".join(run("queue_status", rid, json=True)))
    assert (data["state"], data["done"], data["failed"], data["in_flight"]) == ("completed", 3, 0, 0)


@pytest.mark.django_db
def test_status_falls_back_to_database_after_redis_cleanup(redis_url, r):
    rid, _ = submit("a\n")
    r.delete(*services.engine().keys.request(rid).all())
    data = json.loads("\n".join(run("queue_status", rid, json=True)))
    assert data["id"] == rid and data["source"] == "database" and data["total"] == 1


@pytest.mark.django_db
def test_status_unknown_request(redis_url):
    with pytest.raises(CommandError, match="unknown request 'nope'"):
        run("queue_status", "nope")


def _register_worker(r, wid: str, queues: str, age_seconds: float, current=None):
    keys = Keys(PREFIX)
    now = int(time.time() * 1000)
    beat = now - int(age_seconds * 1000)
    r.zadd(keys.workers, {wid: beat})
    r.hset(keys.worker(wid), mapping={"id": wid, "host": "box", "pid": 4242, "started": beat - 5000,
                                      "heartbeat": beat, "queues": queues,
                                      "current": json.dumps(current or [])})


@pytest.mark.django_db
def test_queue_overview_text_and_json(redis_url, r):
    services.sync_queues()
    client = services.engine()
    client.define_queue("bulk", QueueConfig(paused=True))
    submit("a\nb\n", priority=90)
    submit("c\nd\ne\n", priority=10)
    submit("later\n", delay=60)
    _register_worker(r, "box:4242:aaaa", "default,bulk", 0.2,
                     current=[{"request": "r1", "entry": "1-0", "index": 3, "started": time.time()}])
    _register_worker(r, "box:4343:bbbb", "default", 3600)  # heartbeat long gone: dead

    data = json.loads("\n".join(run("queue_status", json=True)))
    queues = {q["queue"]: q for q in data["queues"]}
    assert set(queues) == {"default", "bulk"}
    default = queues["default"]
    assert default["depth_by_priority"] == {"90": 2, "10": 3}
    assert default["depth"] == 5 and default["scheduled"] == 1
    assert default["in_flight"] == 0 and default["dead_letters"] == 0 and default["paused"] is False
    assert default["live_workers"] == 1 and default["workers"] == ["box:4242:aaaa"]
    assert queues["bulk"]["paused"] is True and queues["bulk"]["live_workers"] == 1
    workers = {w["id"]: w for w in data["workers"]}
    assert workers["box:4242:aaaa"]["live"] is True and workers["box:4343:bbbb"]["live"] is False
    assert workers["box:4242:aaaa"]["queues"] == ["default", "bulk"]
    assert workers["box:4242:aaaa"]["current"][0]["index"] == 3
    assert workers["box:4242:aaaa"]["name"] == "box:4242"  # the name every page shows
    assert data["live_workers"] == 1

    text = "\n".join(run("queue_status"))
    assert "queue bulk  [PAUSED]" in text and "queue default" in text
    assert "p90: 2, p10: 3" in text
    assert "scheduled:    1" in text
    assert "workers: 1 live, 1 dead" in text
    assert "box:4242:aaaa  live" in text and "current=r1#3" in text and "box:4343:bbbb  DEAD" in text


@pytest.mark.django_db
def test_queue_overview_shows_in_flight_and_dead_letters(redis_url):
    rid, _ = submit("a\nb\nc\nd\n", processor="echo", priority=60)
    entry, index, _ = take(rid)
    ack(rid, entry, index, "dead", status="failed", error="RuntimeError: boom")
    take(rid)  # held, not acknowledged: in flight
    default = {q["queue"]: q for q in json.loads("\n".join(run("queue_status", json=True)))["queues"]}["default"]
    assert (default["depth"], default["in_flight"], default["dead_letters"]) == (2, 1, 1)
    assert default["depth_by_priority"] == {"60": 2}
    text = "\n".join(run("queue_status"))
    assert "in flight:    1" in text and "dead letters: 1" in text


# -- queue_results ----------------------------------------------------------------


@pytest.mark.django_db
def test_results_pending_before_any_worker(redis_url):
    rid, _ = submit("a\nb\nc\n")
    lines = [json.loads(line) for line in run("queue_results", rid)]
    assert [x["index"] for x in lines] == [0, 1, 2]
    assert {x["status"] for x in lines} == {"pending"}
    for x in lines:
        assert set(x) >= {"index", "status", "attempts", "worker", "started_at", "finished_at"}


@pytest.mark.django_db
def test_results_ordered_by_index_whatever_the_completion_order(redis_url):
    rid, _ = submit("\n".join(str(i) for i in range(6)) + "\n", processor="echo", concurrency=4)
    complete_out_of_order(rid, 3)
    lines = [json.loads(line) for line in run("queue_results", rid)]
    assert [x["index"] for x in lines] == list(range(6))
    assert [x["status"] for x in lines] == ["done"] * 3 + ["pending"] * 3
    assert [x.get("result") for x in lines[:3]] == ["r0", "r1", "r2"]
    assert lines[0]["worker"] == "test-worker" and lines[0]["attempts"] == 1


@pytest.mark.django_db
def test_results_after_a_worker_ran(redis_url):
    rid, _ = submit("one\ntwo\n")
    failing, _ = submit("x\n", processor="fail")
    services.engine().define_queue("default", QueueConfig(max_attempts=1))  # fail at once, no retry wait
    burst()
    lines = [json.loads(line) for line in run("queue_results", rid)]
    assert [(x["index"], x["status"], x["result"]) for x in lines] == [(0, "done", "ONE"), (1, "done", "TWO")]
    assert all(x["worker"] and x["started_at"] <= x["finished_at"] for x in lines)
    [failed] = [json.loads(line) for line in run("queue_results", failing)]
    assert failed["status"] == "failed" and "RuntimeError" in failed["error"] and failed["attempts"] == 1


@pytest.mark.django_db
def test_results_unknown_request(redis_url):
    with pytest.raises(CommandError, match="unknown request"):
        run("queue_results", "nope")


# -- as a process: exit code and one line on stderr, never a traceback --------------


def manage(*args, redis_url, db, stdin=""):
    env = {**os.environ, "REDIS_URL": redis_url, "DATABASE_PATH": str(db)}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def assert_one_line_error(proc, fragment):
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert fragment in lines[0], proc.stderr


def test_process_submit_status_results(redis_url, cli_db):
    proc = manage("queue_submit", "-", "--processor", "word_count", redis_url=redis_url, db=cli_db,
                  stdin="a b\nc d e\n")
    assert proc.returncode == 0, proc.stderr
    rid = proc.stdout.strip().splitlines()[-1]
    proc = manage("queue_status", rid, "--json", redis_url=redis_url, db=cli_db)
    assert proc.returncode == 0 and json.loads(proc.stdout)["total"] == 2
    proc = manage("queue_results", rid, redis_url=redis_url, db=cli_db)
    assert proc.returncode == 0 and len(proc.stdout.strip().splitlines()) == 2


@pytest.mark.parametrize("args, fragment", [
    (["queue_submit", "-", "--queue", "nope", "--processor", "echo"], "unknown queue"),
    (["queue_submit", "-", "--processor", "nope"], "unknown processor"),
    (["queue_submit", "-", "--processor", "echo", "--priority", "100"], "priority must be"),
    (["queue_submit", "-", "--processor", "echo", "--concurrency", "0"], "concurrency must be"),
    (["queue_submit", "/nonexistent/items.txt", "--processor", "echo"], "No such file"),
    (["queue_status", "nope"], "unknown request"),
    (["queue_results", "nope"], "unknown request"),
])
def test_process_bad_input(redis_url, cli_db, args, fragment):
    assert_one_line_error(manage(*args, redis_url=redis_url, db=cli_db, stdin="a\n"), fragment)


@pytest.mark.parametrize("args", [
    ["queue_submit", "-", "--processor", "echo"],
    ["queue_status"],
    ["queue_status", "abc", "--json"],
    ["queue_results", "abc"],
])
def test_process_redis_down(cli_db, args):
    down = f"redis://127.0.0.1:{embedded.free_port()}/0"  # nobody listens there
    assert_one_line_error(manage(*args, redis_url=down, db=cli_db, stdin="a\n"), "cannot reach Redis")


def test_process_unreadable_file(redis_url, cli_db, tmp_path):
    path = tmp_path / "secret.txt"
    path.write_text("a\n")
    path.chmod(0)
    if os.access(path, os.R_OK):  # root reads anything: use a directory instead
        path = tmp_path
    assert_one_line_error(manage("queue_submit", str(path), "--processor", "echo", redis_url=redis_url, db=cli_db),
                          "Errno")
