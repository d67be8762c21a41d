"""Dashboard benchmark: prints a table.

1. Server time of the overview and request pages (full page and htmx
   fragment, and the live fragment the relay renders) with 10,000 requests
   queued and 1,000,000 items pending (goal: < 100 ms).
2. One ASGI process (daphne) serving 500 WebSockets that all watch one
   request page: time from an engine PUBLISH to the re-rendered fragment
   arriving on every socket (goal: p99 < 250 ms).

Everything runs on 127.0.0.1: its own redis-server on a free port, its own
SQLite file, its own daphne; all stopped at the end (by pid).

    .venv/bin/python bench/dashboard.py                    # full size
    .venv/bin/python bench/dashboard.py --requests 1000 --items 100000 --sockets 100   # quick
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def pct(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    k = min(len(values) - 1, max(0, int(round(p / 100 * (len(values) - 1)))))
    return values[k]


def setup(tmp: Path):
    from core import embedded

    port = embedded.free_port()
    redis_proc = embedded.start(port, tmp / "redis", appendonly=False, log=tmp / "redis.log")
    os.environ.update({"REDIS_URL": f"redis://127.0.0.1:{port}/0", "DATABASE_PATH": str(tmp / "db.sqlite3"),
                       "DJANGO_SETTINGS_MODULE": "queueadmin.settings", "DJANGO_DEBUG": "0",
                       "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost,testserver"})
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    return redis_proc


def populate(n_requests: int, n_items: int) -> tuple[str, str]:
    """n_requests queued requests holding n_items items in all; one of them big."""
    from core import services
    from core.engine.client import QueueClient

    services.sync_queues()
    client: QueueClient = services.engine()
    big_items = n_items // 10
    per = max(1, (n_items - big_items) // max(1, n_requests - 1))
    started = time.perf_counter()
    big = client.submit("default", "echo", [f"big item {i}" for i in range(big_items)], priority=60, dedup=False).id
    sample = None
    batch = [f"item {i} of a queued request" for i in range(per)]
    for n in range(n_requests - 1):
        rid = client.submit("default", "echo", batch, priority=n % 100, concurrency=4, dedup=False).id
        sample = sample or rid
    took = time.perf_counter() - started
    total = big_items + per * (n_requests - 1)
    print(f"populated {n_requests:,} requests / {total:,} items in {took:.1f}s", file=sys.stderr)
    return sample, big


def time_pages(sample: str, big: str, runs: int) -> list[tuple[str, float, float]]:
    from django.contrib.auth.models import User
    from django.test import Client

    from core.views.live import render_topic

    user = User.objects.create_superuser("bench", "bench@example.com", "x")
    c = Client()
    c.force_login(user)
    rows = []
    cases = [
        ("overview page (full)", lambda: c.get("/")),
        ("overview fragment (htmx)", lambda: c.get("/", headers={"HX-Request": "true"})),
        ("overview live fragment (relay)", lambda: render_topic("overview", True)),
        ("request page, 90 items (full)", lambda: c.get(f"/requests/{sample}/")),
        ("request page, 100k items (full)", lambda: c.get(f"/requests/{big}/")),
        ("request page, 100k items, last page", lambda: c.get(f"/requests/{big}/?after=$")),
        ("request live fragment (relay)", lambda: render_topic(f"request:{big}::", True)),
        ("requests list (DB + live overlay)", lambda: c.get("/requests/")),
    ]
    for name, fn in cases:
        r = fn()
        assert getattr(r, "status_code", 200) == 200, (name, r)
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1000)
        rows.append((name, statistics.median(times), pct(times, 95)))
    return rows


# -- a minimal WebSocket client (RFC 6455; server frames are unmasked) ---------------


class WS:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int, path: str, cookie: str):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        key = base64.b64encode(secrets.token_bytes(16)).decode()
        writer.write((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                      f"Origin: http://127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n").encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError(head.decode(errors="replace"))
        return cls(reader, writer)

    async def recv(self) -> str:
        data = b""
        while True:
            b0, b1 = await self.reader.readexactly(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(await self.reader.readexactly(2), "big")
            elif n == 127:
                n = int.from_bytes(await self.reader.readexactly(8), "big")
            payload = await self.reader.readexactly(n)
            opcode = b0 & 0x0F
            if opcode == 8:
                raise ConnectionError("closed")
            if opcode in (1, 0, 2):
                data += payload
                if b0 & 0x80:
                    return data.decode()

    def close(self):
        self.writer.close()


async def ws_bench(port: int, cookie: str, rid: str, sockets: int, events: int, gap: float):
    import redis as redis_lib

    from core import services

    eng = services.engine()
    r = redis_lib.Redis.from_url(os.environ["REDIS_URL"])
    meta = eng.keys.request(rid).meta
    path = f"/ws/live/?topic=request:{rid}::"
    clients = []
    t0 = time.perf_counter()
    for i in range(0, sockets, 50):  # connect in waves; each gets the current state first
        batch = await asyncio.gather(*(WS.connect(port, path, cookie) for _ in range(min(50, sockets - i))))
        clients.extend(batch)
        await asyncio.gather(*(c.recv() for c in batch))
    connect_time = time.perf_counter() - t0
    published: dict[int, float] = {}
    latencies: list[float] = []
    got_last = [0] * len(clients)
    pattern = re.compile(r'data-done="(\d+)"')
    stop = asyncio.Event()

    async def reader(i, c):
        while True:
            try:
                msg = await c.recv()
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                return
            now = time.perf_counter()
            m = pattern.search(msg)
            if not m:
                continue
            done = int(m[1])
            for n in range(got_last[i] + 1, done + 1):
                if n in published:
                    latencies.append((now - published[n]) * 1000)
            got_last[i] = max(got_last[i], done)

    readers = [asyncio.create_task(reader(i, c)) for i, c in enumerate(clients)]
    await asyncio.sleep(1.0)
    r.hset(meta, "done", 0)
    for n in range(1, events + 1):
        r.hset(meta, "done", n)
        published[n] = time.perf_counter()
        r.publish(eng.channel, f'{{"type":"progress","id":"{rid}","done":{n},"t":{int(time.time() * 1000)}}}')
        await asyncio.sleep(gap)
    deadline = time.perf_counter() + 10
    while min(got_last) < events and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    stop.set()
    for t in readers:
        t.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    for c in clients:
        c.close()
    complete = sum(1 for g in got_last if g >= events)
    return {"connect_s": connect_time, "samples": len(latencies), "p50": pct(latencies, 50),
            "p99": pct(latencies, 99), "max": max(latencies) if latencies else float("nan"),
            "complete": complete, "expected": sockets * events}


def start_daphne(tmp: Path) -> tuple[subprocess.Popen, int]:
    from core import embedded

    port = embedded.free_port()
    log = open(tmp / "daphne.log", "wb")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "daphne"), "-b", "127.0.0.1", "-p", str(port),
                             "queueadmin.asgi:application"], cwd=ROOT, env=os.environ.copy(), stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=1).read()
            return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((tmp / "daphne.log").read_text())
            time.sleep(0.2)


def session_cookie() -> str:
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore

    user = User.objects.get(username="bench")
    s = SessionStore()
    s[SESSION_KEY] = str(user.pk)
    s[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    s[HASH_SESSION_KEY] = user.get_session_auth_hash()
    s.save()
    return f"{settings.SESSION_COOKIE_NAME}={s.session_key}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--sockets", type=int, default=500)
    ap.add_argument("--events", type=int, default=20)
    ap.add_argument("--gap", type=float, default=0.3, help="seconds between published events")
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="qa-bench-") as d:
        tmp = Path(d)
        redis_proc = setup(tmp)
        daphne = None
        try:
            sample, big = populate(args.requests, args.items)
            rows = time_pages(sample, big, args.runs)
            cookie = session_cookie()
            daphne, port = start_daphne(tmp)
            ws = asyncio.run(ws_bench(port, cookie, big, args.sockets, args.events, args.gap))
        finally:
            if daphne is not None and daphne.poll() is None:
                os.kill(daphne.pid, signal.SIGTERM)
                try:
                    daphne.wait(10)
                except subprocess.TimeoutExpired:
                    os.kill(daphne.pid, signal.SIGKILL)
            from core import embedded

            embedded.stop(redis_proc)
    print(f"\nqueueadmin dashboard benchmark — {args.requests:,} requests queued, {args.items:,} items pending, "
          f"{os.cpu_count()} CPUs\n")
    print(f"| {'measure':<42} | {'median':>9} | {'p95':>9} | goal     |")
    print(f"|{'-' * 44}|{'-' * 11}|{'-' * 11}|----------|")
    for name, med, p95 in rows:
        print(f"| {name:<42} | {med:>6.1f} ms | {p95:>6.1f} ms | < 100 ms |")
    print(f"\n| {'WebSockets (one daphne process)':<42} | {'value':>21} | goal     |")
    print(f"|{'-' * 44}|{'-' * 23}|----------|")
    print(f"| {'sockets watching one request':<42} | {args.sockets:>21,} |          |")
    print(f"| {'connect + first state, all sockets':<42} | {ws['connect_s']:>19.1f} s |          |")
    print(f"| {'publish-to-socket latency p50':<42} | {ws['p50']:>18.1f} ms |          |")
    print(f"| {'publish-to-socket latency p99':<42} | {ws['p99']:>18.1f} ms | < 250 ms |")
    print(f"| {'publish-to-socket latency max':<42} | {ws['max']:>18.1f} ms |          |")
    print(f"| {'updates delivered (socket x event)':<42} | {ws['samples']:>9,} / {ws['expected']:>9,} |          |")
    print(f"| {'sockets that saw the final state':<42} | {ws['complete']:>9,} / {args.sockets:>9,} | all      |")


if __name__ == "__main__":
    main()
