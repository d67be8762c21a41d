"""Limits and valid text at every entry point but the JSON API: the Python
client, the dashboard's submit form (textarea and file upload) and
`queue_submit` (file, standard input, --json). Text that is not valid Unicode
(lone surrogates) is refused with a clear message; NUL bytes, right-to-left
marks, HTML, 1 MB items and 50,000 items round-trip exactly. Real redis-server
(the `redis_url` fixture) and the test database."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from queueadmin.core import services
from queueadmin.core.engine.client import limits
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.models import RequestRecord

ROOT = Path(__file__).resolve().parents[3]
SURROGATE = "a\ud800b"
# text that must survive every entry point unchanged
ODD = ["nul\x00byte", "rtl \u202eevil\u202c mark \u200f", "<script>alert(1)</script>&amp;", "emoji \U0001F600",
       "tab\tinside", "  padded  "]


@pytest.fixture
def eng(redis_url, db):
    services.sync_queues()
    return services.engine()


def payloads(rid: str) -> list:
    return [i["payload"] for i in services.engine().items(rid, count=100_000)]


# -- the Python client ---------------------------------------------------------------


@pytest.mark.parametrize("item", [SURROGATE, ["x", SURROGATE], {"k": SURROGATE}, {SURROGATE: 1}, "\udfff"])
def test_client_refuses_lone_surrogates_in_items(qc, r, item):
    with pytest.raises(QueueError, match="item 1 is not valid Unicode"):
        qc.submit("default", "echo", ["fine", item])
    sub = qc.begin("default", "echo")
    with pytest.raises(QueueError, match="item 0 is not valid Unicode"):
        qc.add(sub.id, [item])
    assert qc.status(sub.id)["total"] == 0  # nothing half-added


def test_client_refuses_lone_surrogates_in_dedup_key_and_names(qc):
    with pytest.raises(QueueError, match="de-dup key is not valid Unicode"):
        qc.submit("default", "echo", ["a"], dedup_key=SURROGATE)
    with pytest.raises(QueueError, match="de-dup key is not valid Unicode"):
        qc.begin("default", "echo", dedup_key=SURROGATE)
    with pytest.raises(QueueError, match="queue name is not valid Unicode"):
        qc.submit(SURROGATE, "echo", ["a"])
    with pytest.raises(QueueError, match="processor name is not valid Unicode"):
        qc.submit("default", SURROGATE, ["a"])


def test_client_caps_dedup_key_item_size_and_count(qc, monkeypatch):
    with pytest.raises(QueueError, match=f"longer than {limits.MAX_DEDUP_KEY_CHARS} characters"):
        qc.submit("default", "echo", ["a"], dedup_key="k" * (limits.MAX_DEDUP_KEY_CHARS + 1))
    assert qc.submit("default", "echo", ["a"], dedup_key="k" * limits.MAX_DEDUP_KEY_CHARS).id
    with pytest.raises(QueueError, match="item 0 is larger than 2 MiB"):
        qc.submit("default", "echo", ["x" * limits.MAX_ITEM_BYTES])
    with pytest.raises(QueueError, match="cannot be stored as JSON"):
        qc.submit("default", "echo", [{1, 2}])
    monkeypatch.setattr(limits, "MAX_ITEMS_PER_REQUEST", 5)
    with pytest.raises(QueueError, match="at most 5 items per request"):
        qc.submit("default", "echo", list(range(6)))
    assert qc.submit("default", "echo", list(range(5))).id


def test_client_round_trips_odd_text_big_items_and_many_items(qc):
    big = "é" * 500_000 + "x" * 48_576  # a 1 MB string (1,048,576 bytes of UTF-8)
    sub = qc.submit("default", "echo", [*ODD, {"k\x00": ODD}, big])
    assert [i["payload"] for i in qc.items(sub.id, count=100)] == [*ODD, {"k\x00": ODD}, big]
    many = [f"item {n}" for n in range(50_000)]
    sub = qc.submit("default", "echo", many)
    assert qc.status(sub.id)["total"] == 50_000
    assert [i["payload"] for i in qc.items(sub.id, start=49_990, count=10)] == many[-10:]


# -- the dashboard's submit form ------------------------------------------------------


@pytest.fixture
def staff(client, eng):
    client.force_login(User.objects.create_superuser("boss", "boss@example.com", "pw"))
    return client


def post(staff, **data):
    return staff.post(reverse("queueadmin:submit"), {"queue": "default", "processor": "echo", **data})


def accepted(response) -> str:
    assert response.status_code == 302, response.content.decode()[:2000]
    return response["Location"].rstrip("/").split("/")[-1]


def form_error(response) -> str:
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize("data", [
    {"items": json.dumps(SURROGATE), "json_items": "on"},
    {"items": '"ok"\n{"k": "\\udfff"}', "json_items": "on"},
    {"upload": SimpleUploadedFile("i.jsonl", b'"ok"\n["\\ud800"]\n'), "json_items": "on"},
])
def test_form_refuses_lone_surrogates_with_a_form_error(staff, data):
    page = form_error(post(staff, **data))
    assert "is not valid Unicode text" in page
    assert RequestRecord.objects.count() == 0


def test_form_errors_name_the_line_and_caps_apply(staff):
    page = form_error(post(staff, items='"a"\n\n{bad', json_items="on"))
    assert "line 3 is not valid JSON" in page  # numbered as in the text, blank lines counted
    page = form_error(post(staff, upload=SimpleUploadedFile("big.txt", b"ok\n" + b"x" * limits.MAX_ITEM_BYTES)))
    assert "line 2 is larger than 2 MiB" in page
    page = form_error(post(staff, items="a", dedup_key="k" * (limits.MAX_DEDUP_KEY_CHARS + 1)))
    assert f"at most {limits.MAX_DEDUP_KEY_CHARS} characters" in page
    page = form_error(post(staff, upload=SimpleUploadedFile("bin.txt", b"ok\n\xff\xfe\n")))
    assert "not UTF-8 text" in page
    assert RequestRecord.objects.count() == 0


def test_form_round_trips_odd_text(staff):
    rid = accepted(post(staff, items="\n".join(ODD)))
    assert payloads(rid) == ODD
    rid = accepted(post(staff, items="\n".join(json.dumps(x) for x in [*ODD, {"a\x00": [1, None]}]),
                        json_items="on"))
    assert payloads(rid) == [*ODD, {"a\x00": [1, None]}]


def test_form_round_trips_a_1mb_item_and_50000_items_by_upload(staff):
    big = "€" * 349_525 + "x"  # 1,048,576 bytes of UTF-8
    rid = accepted(post(staff, upload=SimpleUploadedFile("big.txt", f"small\n{big}\n".encode())))
    assert payloads(rid) == ["small", big]
    many = [f"<b>item {n}</b>" for n in range(50_000)]
    rid = accepted(post(staff, upload=SimpleUploadedFile("many.txt", "\n".join(many).encode())))
    assert services.engine().status(rid)["total"] == 50_000
    assert payloads(rid) == many


def test_form_time_limit_reaches_the_request(staff):
    rid = accepted(post(staff, items="a", time_limit_seconds="2.5"))
    assert float(services.engine().status(rid)["time_limit"]) == 2.5
    rid = accepted(post(staff, items="b", time_limit_seconds="0"))
    assert float(services.engine().status(rid)["time_limit"]) == 0
    rid = accepted(post(staff, items="c"))
    assert "time_limit" not in services.engine().status(rid)  # the queue's applies
    assert "greater than or equal to 0" in form_error(post(staff, items="d", time_limit_seconds="-1"))


# -- queue_submit ---------------------------------------------------------------------


def run(*args, stdin=None, **options) -> list[str]:
    out = io.StringIO()
    if stdin is not None:
        options["stdin"] = io.StringIO(stdin)
    call_command(*args, stdout=out, **options)
    return out.getvalue().splitlines()


@pytest.mark.django_db
def test_queue_submit_refuses_lone_surrogates_naming_the_line(eng, tmp_path):
    with pytest.raises(CommandError, match="line 2 is not valid Unicode text"):
        run("queue_submit", "-", stdin='"ok"\n"a\\ud800b"\n', processor="echo", json=True)
    with pytest.raises(CommandError, match="line 1 is not valid Unicode text"):
        run("queue_submit", "-", stdin=f"{SURROGATE}\n", processor="echo")
    path = tmp_path / "items.jsonl"
    path.write_text('{"k": "\\udc00"}\n')
    with pytest.raises(CommandError, match="line 1 is not valid Unicode text"):
        run("queue_submit", str(path), processor="echo", json=True)
    with pytest.raises(CommandError, match="de-dup key is not valid Unicode"):
        run("queue_submit", "-", stdin="a\n", processor="echo", dedup_key=SURROGATE)
    with pytest.raises(CommandError, match="line 1 is not JSON"):
        run("queue_submit", "-", stdin="[" * 100_000 + "\n", processor="echo", json=True)
    assert RequestRecord.objects.count() == 0


@pytest.mark.django_db
def test_queue_submit_round_trips_odd_text_and_sets_a_time_limit(eng, tmp_path):
    path = tmp_path / "odd.txt"
    big = "€" * 349_525 + "x"  # 1,048,576 bytes of UTF-8
    path.write_text("\n".join([*ODD, big]) + "\n", encoding="utf-8", newline="")
    rid = run("queue_submit", str(path), processor="echo", time_limit=1.5)[-1]
    assert payloads(rid) == [*ODD, big]
    assert float(eng.status(rid)["time_limit"]) == 1.5
    rid = run("queue_submit", "-", stdin="\n".join(json.dumps(x) for x in ODD), processor="echo", json=True)[-1]
    assert payloads(rid) == ODD
    with pytest.raises(CommandError, match="time limit must be between"):
        run("queue_submit", "-", stdin="a\n", processor="echo", time_limit=-1)
    with pytest.raises(CommandError, match="delay must be between"):
        run("queue_submit", "-", stdin="a\n", processor="echo", delay=float("nan"))


# as a process: the bytes a shell would pass, one line on stderr, never a traceback

@pytest.fixture(scope="module")
def cli_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("inputsdb") / "db.sqlite3"
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True,
                   env={**os.environ, "DATABASE_PATH": str(path)})
    return path


def manage(*args, redis_url, db, stdin=b""):
    env = {**os.environ, "REDIS_URL": redis_url, "DATABASE_PATH": str(db)}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, timeout=120)


def one_line_error(proc, fragment: str) -> None:
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert fragment in err, err


@pytest.mark.parametrize("args, stdin, fragment", [
    (["--json"], b'"a\\ud800b"\n', "line 1 is not valid Unicode text"),
    (["--json"], b'1\n{"\\udfff": 2}\n', "line 2 is not valid Unicode text"),
    ([], b"ok\n\xff\xfe bad bytes\n", "not valid UTF-8"),
    ([], b"ok\n\xed\xa0\x80 an encoded surrogate\n", "not valid UTF-8"),
    (["--dedup-key", os.fsdecode(b"key\xff")], b"a\n", "not valid Unicode"),
    (["--queue", os.fsdecode(b"q\xff")], b"a\n", "not valid Unicode"),
])
def test_queue_submit_process_one_line_errors(redis_url, cli_db, args, stdin, fragment):
    proc = manage("queue_submit", "-", "--processor", "echo", *args, redis_url=redis_url, db=cli_db, stdin=stdin)
    one_line_error(proc, fragment)


def test_queue_submit_process_round_trips_bytes(redis_url, cli_db):
    text = "\n".join(ODD) + "\n"
    proc = manage("queue_submit", "-", "--processor", "echo", redis_url=redis_url, db=cli_db,
                  stdin=text.encode())
    assert proc.returncode == 0, proc.stderr
    rid = proc.stdout.decode().split()[-1]
    assert payloads(rid) == ODD
