"""Logs an operator can ship (core/logs.py): QUEUEADMIN_LOG_FORMAT=json gives
one JSON object per line from the workers, Django and the web server; plain
text stays the default."""
from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from queueadmin.core import embedded, services
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.logs import FIELDS, JsonFormatter, log_format
from tests.engine_helpers import WorkerProcs

ROOT = Path(__file__).resolve().parents[1]


def emit(logger_name: str, msg: str, *args, exc: bool = False, **extra) -> str:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    logger.propagate, logger.level = False, logging.INFO
    try:
        if exc:
            try:
                raise KeyError("lost")
            except KeyError:
                logger.exception(msg, *args, extra=extra)
        else:
            logger.info(msg, *args, extra=extra)
    finally:
        logger.removeHandler(handler)
    return out.getvalue()


def test_a_record_is_one_json_object_with_the_item_fields():
    fields = {"request_id": "018f00aa11bb22", "index": 7, "queue": "default", "worker": "host:1:ab",
              "attempt": 2, "duration": 0.0125, "outcome": "done"}
    line = emit("queueadmin.worker", "item %s of %s done", 7, "018f00aa11bb22", **fields)
    assert line.count("\n") == 1
    got = json.loads(line)
    assert list(got)[:4] == ["time", "level", "logger", "message"]
    assert got["level"] == "INFO" and got["logger"] == "queueadmin.worker"
    assert got["message"] == "item 7 of 018f00aa11bb22 done"
    assert {k: got[k] for k in FIELDS} == fields
    assert got["time"].endswith("+00:00") and "T" in got["time"]


def test_a_traceback_stays_on_one_line_and_odd_extras_still_serialise():
    line = emit("queueadmin.worker", 'multi\nline "quoted"', exc=True, payload=object(), when=b"\xff")
    assert line.count("\n") == 1
    got = json.loads(line)
    assert got["message"] == 'multi\nline "quoted"' and got["level"] == "ERROR"
    assert "KeyError: 'lost'" in got["exc_info"] and "payload" in got


def test_the_format_comes_from_the_environment(monkeypatch):
    for value, expected in [("json", "json"), ("JSON ", "json"), ("plain", "plain"), ("", "plain"),
                            ("yaml", "plain")]:
        monkeypatch.setenv("QUEUEADMIN_LOG_FORMAT", value)
        assert log_format() == expected
    monkeypatch.delenv("QUEUEADMIN_LOG_FORMAT")
    assert log_format() == "plain"


def shell_log(fmt: str | None, tmp_path) -> str:
    """What a Django process prints for a Django and a queueadmin log line."""
    env = {**os.environ, "DATABASE_PATH": str(tmp_path / "db.sqlite3"), "DJANGO_SETTINGS_MODULE": "queueadmin.settings"}
    env.pop("QUEUEADMIN_LOG_FORMAT", None)
    if fmt:
        env["QUEUEADMIN_LOG_FORMAT"] = fmt
    code = ("import django, logging; django.setup(); logging.getLogger('django.request').warning("
            "'not found: %s', '/x', extra={'request_id': 'r1'}); logging.getLogger('queueadmin.api').info('hello')")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_django_and_queueadmin_lines_under_json_and_plain(tmp_path):
    lines = [json.loads(line) for line in shell_log("json", tmp_path).splitlines()]
    assert [(d["logger"], d["message"]) for d in lines] == [("django.request", "not found: /x"),
                                                             ("queueadmin.api", "hello")]
    assert lines[0]["request_id"] == "r1" and lines[0]["level"] == "WARNING"
    plain = shell_log(None, tmp_path).splitlines()
    assert plain[-1].endswith("INFO queueadmin.api: hello")
    with pytest.raises(ValueError):
        json.loads(plain[-1])


def test_a_worker_process_logs_json_lines(redis_url, worker_db, tmp_path):
    services.engine().define_queue("default", QueueConfig())
    services.engine().submit("default", "echo", ["a", "b"])
    procs = WorkerProcs(redis_url, worker_db, tmp_path, QUEUEADMIN_LOG_FORMAT="json")
    try:
        proc = procs.start(burst=True)
        assert proc.wait(timeout=60) == 0, procs.logs()
    finally:
        procs.stop_all()
    text = (tmp_path / "worker-0.log").read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert lines and all({"time", "level", "logger", "message"} <= set(d) for d in lines)
    assert any(d["logger"] == "queueadmin.worker" and "exiting" in d["message"] for d in lines)


def test_the_web_server_logs_json_lines(worker_db, tmp_path):
    port = embedded.free_port()
    env = {**os.environ, "DATABASE_PATH": str(worker_db), "QUEUEADMIN_LOG_FORMAT": "json", "DJANGO_DEBUG": "0"}
    log = tmp_path / "uvicorn.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
                                 "--lifespan", "off", "queueadmin.asgi:application"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=5) as resp:
                    assert resp.status == 200
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    access = [d for d in lines if d["logger"] == "uvicorn.access"]
    assert access and "/accounts/login/" in access[-1]["message"] and "200" in access[-1]["message"]
    assert any(d["logger"] == "uvicorn.error" and "Started server process" in d["message"] for d in lines)
