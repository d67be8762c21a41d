"""The standalone service started from this checkout (`bin/run` runs
`python -m queueadmin run`) keeps what it writes private to its user: the
SQLite database, the generated keys, the embedded Redis's append-only file
and log are 0600 and folders 0700, after a first start in a data folder that
already held world-readable files (bin/run fetches the front-end files into
var/ first). tests/test_package.py checks the same for the installed wheel."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from queueadmin.core import embedded
from tests.standalone.test_package import clean_env, wait_http

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]


def test_a_first_start_from_the_checkout_leaves_every_file_private(tmp_path):
    data = tmp_path / "var"
    (data / "frontend" / "dist").mkdir(parents=True)
    os.chmod(data, 0o755)
    loose_before = data / "frontend" / "dist" / "htmx.min.js"
    loose_before.write_text("/* fetched before the first start, under the usual umask */")
    os.chmod(loose_before, 0o644)
    port, redis_port = embedded.free_port(), embedded.free_port()
    env = clean_env(HOME=str(tmp_path))
    service = subprocess.Popen([sys.executable, "-m", "queueadmin", "run", "--data-dir", str(data), "--port",
                                str(port), "--redis-port", str(redis_port), "--processes", "1"],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=120)
    finally:
        service.send_signal(signal.SIGTERM)
        log = service.communicate(timeout=90)[0]
    assert service.returncode == 0, log
    modes = {str(p.relative_to(data)): p.stat().st_mode & 0o777 for p in data.rglob("*") if not p.is_symlink()}
    for name in ("db.sqlite3", "secret_key", "webhook_secret", "redis/appendonly.aof", "redis/redis.log"):
        assert modes.get(name) == 0o600, (name, modes)
    assert data.stat().st_mode & 0o777 == 0o700
    assert {oct(m) for m in modes.values()} <= {"0o600", "0o700"}, modes
    assert all(modes[name] == 0o700 for name in modes if (data / name).is_dir()), modes


def test_a_command_run_before_the_first_start_writes_private_files_too(tmp_path):
    """`queueadmin migrate` (or manage.py's) in a fresh data folder: the
    database, the keys and the folder the settings make are private."""
    data = tmp_path / "fresh"
    env = clean_env(HOME=str(tmp_path), QUEUEADMIN_VAR=str(data))
    done = subprocess.run([sys.executable, "-m", "queueadmin", "migrate", "-v", "0"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert data.stat().st_mode & 0o777 == 0o700
    for name in ("db.sqlite3", "secret_key", "webhook_secret"):
        assert (data / name).stat().st_mode & 0o777 == 0o600, name
