"""The operator's commands start fast (issue 9): `queue_status` and
`queue_submit` load neither the web server (daphne, Twisted) nor the URLconf,
views or API. Checked on the modules a real `manage.py` process imports
(`python -X importtime`), not on timings, which depend on the machine."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB_PACKAGES = ("daphne", "twisted", "autobahn", "uvicorn", "ninja")
WEB_MODULES = ("queueadmin.core.views", "queueadmin.core.api", "queueadmin.core.live.consumers", "queueadmin.core.live.relay", "queueadmin.urls", "queueadmin.asgi")


def imported_modules(args, redis_url, db, stdin="") -> set[str]:
    env = {**os.environ, "REDIS_URL": redis_url, "DATABASE_PATH": str(db)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "manage.py", *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


@pytest.mark.parametrize("args,stdin", [
    (("queue_status",), ""),
    (("queue_status", "--json"), ""),
    (("queue_submit", "-", "--processor", "echo", "--no-dedup"), "a\nb\n"),
], ids=["status", "status-json", "submit"])
def test_command_loads_no_web_stack(args, stdin, redis_url, worker_db):
    mods = imported_modules(args, redis_url, worker_db, stdin)
    assert "django.db.models" in mods and "redis" in mods  # the listing is real: Django and Redis did load
    web = sorted(m for m in mods if m.split(".")[0] in WEB_PACKAGES or m.startswith(WEB_MODULES))
    assert not web, f"{args[0]} imported {len(web)} web-only modules: {web[:15]}"
