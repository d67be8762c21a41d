"""Process titles (core/engine/runtime/title.py): the standalone's web
process shows `queueadmin web` in ps (a process of its own, so that the
test runner's title stays as it is); a worker's title says its name, queues,
busy items and state (tests/engine/runtime/test_worker_control.py checks
real worker processes)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from queueadmin.core.engine.runtime.title import worker_text

ROOT = Path(__file__).resolve().parents[2]


def test_the_standalone_web_application_titles_its_process(tmp_path):
    code = ("from queueadmin.asgi import standalone_application; standalone_application(); "
            "from queueadmin.core.engine.runtime import title; print(title.current())")
    env = {**os.environ, "DATABASE_PATH": str(tmp_path / "db.sqlite3"), "DJANGO_SETTINGS_MODULE": "queueadmin.settings"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "queueadmin web"


def test_a_workers_title_says_what_it_does():
    assert worker_text("vm:10707", ["default", "io"], 3) == "worker vm:10707 default,io [3 busy]"
    assert worker_text("vm:10707", ["default"], 0, "quiet") == "worker vm:10707 default [0 busy] quiet"
