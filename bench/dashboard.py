"""Dashboard benchmark: prints tables.

1. Server time of the overview and request pages (full page and htmx
   fragment, and the live fragment the relay renders) with 10,000 requests
   queued and 1,000,000 items pending (goal: < 100 ms).
2. One ASGI process, started as bin/run starts it (uvicorn), serving 500
   WebSockets that all watch one request page: time from an engine PUBLISH to
   the re-rendered fragment arriving on each socket (goal: p99 < 250 ms). The
   sockets are served by a client in its own process (one asyncio loop, raw
   frames, permessage-deflate offered as browsers do); its CPU and the
   server's are reported. Several rounds, each with a fresh server; medians.
   `--server` compares other servers or options (see SERVERS), interleaved.

Everything runs on 127.0.0.1: its own redis-server on a free port, its own
SQLite file, its own server processes; all stopped at the end (by pid).

    .venv/bin/python bench/dashboard.py                    # full size
    .venv/bin/python bench/dashboard.py --requests 1000 --items 100000 --sockets 100   # quick
    .venv/bin/python bench/dashboard.py --no-pages --server uvicorn --server daphne     # servers side by side
    QUEUEADMIN_LOG_LEVEL=DEBUG .venv/bin/python bench/dashboard.py --no-pages --profile /tmp/prof
        # py-spy (pip install py-spy) of the server: collapsed stacks + the relay's timings per render
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import secrets
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib
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
    from queueadmin.core import embedded

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
    from queueadmin.core import services
    from queueadmin.core.engine.client.queue_client import QueueClient

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


def bench_user():
    from django.contrib.auth.models import User

    user = User.objects.filter(username="bench").first()
    return user or User.objects.create_superuser("bench", "bench@example.com", "x")


def time_pages(sample: str, big: str, runs: int) -> list[tuple[str, float, float]]:
    from django.test import Client

    from queueadmin.core.live.render import render_topic

    user = bench_user()
    c = Client()
    c.force_login(user)
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
    return time_cases(cases, runs)


def time_cases(cases, runs: int) -> list[tuple[str, float, float]]:
    """(name, median ms, p95 ms) of each (name, call) over `runs` timed calls,
    after one untimed call that must answer 200."""
    rows = []
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


# -- the WebSocket client: its own process, one asyncio loop, cheap framing -----------
#
# It runs apart from this process (which publishes the events) so that its CPU
# time is not the server's and can be measured: it reports what it used while
# the events were published. Both processes timestamp with CLOCK_MONOTONIC.

CLIENT_WAVE = 50  # sockets connecting at once


class _Sock(asyncio.Protocol):
    """A WebSocket client connection: handshake, then unmasked server frames
    parsed from one buffer; text messages go to `on_text(i, str)`; pings are
    answered (servers drop sockets that do not). Like a browser, it offers
    permessage-deflate, and inflates what the server compressed."""

    def __init__(self, i, request: bytes, on_text):
        self.i, self.request, self.on_text = i, request, on_text
        self.buf = bytearray()
        self.deflate = False  # the server compresses messages
        self.takeover = True  # ... with one LZ77 window for the whole connection
        self.inflater = None
        self.compressed = False
        self.open = asyncio.get_running_loop().create_future()
        self.closed = False
        self.first = asyncio.get_running_loop().create_future()
        self.frag = bytearray()

    def connection_made(self, transport):
        self.transport = transport
        transport.write(self.request)

    def connection_lost(self, exc):
        self.closed = True
        for f in (self.open, self.first):
            if not f.done():
                f.set_exception(ConnectionError(f"socket {self.i} closed"))

    def data_received(self, data):
        self.buf += data
        if not self.open.done():
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end])
            del self.buf[:end + 4]
            if b" 101 " not in head.split(b"\r\n")[0]:
                self.open.set_exception(RuntimeError(head.decode(errors="replace")))
                self.transport.close()
                return
            for line in head.lower().split(b"\r\n"):
                if line.startswith(b"sec-websocket-extensions:") and b"permessage-deflate" in line:
                    self.deflate = True
                    self.takeover = b"server_no_context_takeover" not in line
                    self.inflater = zlib.decompressobj(-zlib.MAX_WBITS)
            self.open.set_result(None)
        buf, pos, n_buf = self.buf, 0, len(self.buf)
        while n_buf - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            n, head = b1 & 0x7F, 2
            if n == 126:
                if n_buf - pos < 4:
                    break
                n, head = int.from_bytes(buf[pos + 2:pos + 4], "big"), 4
            elif n == 127:
                if n_buf - pos < 10:
                    break
                n, head = int.from_bytes(buf[pos + 2:pos + 10], "big"), 10
            if n_buf - pos < head + n:
                break
            payload = bytes(buf[pos + head:pos + head + n])
            pos += head + n
            opcode = b0 & 0x0F
            if opcode == 9:  # ping -> masked pong
                self.transport.write(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
            elif opcode == 8:
                self.transport.close()
            elif opcode in (0, 1, 2):
                if opcode:
                    self.compressed = self.deflate and bool(b0 & 0x40)
                self.frag += payload
                if b0 & 0x80:
                    data = bytes(self.frag)
                    if self.compressed:
                        if not self.takeover:
                            self.inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                        data = self.inflater.decompress(data + b"\x00\x00\xff\xff")
                    text = data.decode()
                    self.frag = bytearray()
                    if not self.first.done():
                        self.first.set_result(text)
                    else:
                        self.on_text(self.i, text)
        del buf[:pos]


async def _client(port: int, path: str, cookie: str, sockets: int):
    """The client process: connect, print `ready <seconds>`, then on stdin
    `go <events>` record when each socket sees each `data-done` value, print
    `complete` once every socket saw <events>, and on `end` print the results
    as JSON (arrival times per socket and the CPU used since `go`)."""
    loop = asyncio.get_running_loop()
    pattern = re.compile(r'data-done="(\d+)"')
    seen: list[dict[int, float]] = [dict() for _ in range(sockets)]
    last = [0] * sockets
    final = [None]
    complete = asyncio.Event()

    def on_text(i, text):
        now = time.monotonic()
        m = pattern.search(text)
        if m:
            done = int(m[1])
            if done > last[i]:
                seen[i][done] = now
                last[i] = done
                if final[0] is not None and done >= final[0] and min(last) >= final[0]:
                    complete.set()

    conns = []
    t0 = time.monotonic()
    for start in range(0, sockets, CLIENT_WAVE):
        wave = []
        for i in range(start, min(sockets, start + CLIENT_WAVE)):
            key = base64.b64encode(secrets.token_bytes(16)).decode()
            req = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                   f"Origin: http://127.0.0.1:{port}\r\nCookie: {cookie}\r\n"
                   f"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n").encode()
            wave.append(loop.create_connection(lambda i=i, req=req: _Sock(i, req, on_text), "127.0.0.1", port))
        made = await asyncio.gather(*wave)
        conns.extend(p for _, p in made)
        await asyncio.gather(*(p.first for _, p in made))  # each gets the current state first
    print(f"ready {time.monotonic() - t0:.3f}", flush=True)
    cpu0 = wall0 = 0.0
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).split()
        if not line or line[0] == "end":
            break
        if line[0] == "go":
            cpu0, wall0 = time.process_time(), time.monotonic()
            final[0] = int(line[1])
            loop.create_task(_say_when(complete))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    for p in conns:
        p.transport.close()
    print(json.dumps({"seen": [{str(k): v for k, v in s.items()} for s in seen], "cpu_s": cpu, "wall_s": wall,
                      "closed": sum(p.closed for p in conns), "deflate": sum(p.deflate for p in conns)}),
          flush=True)


async def _say_when(event: asyncio.Event):
    await event.wait()
    print("complete", flush=True)


def client_main(argv):
    port, path, cookie, sockets = int(argv[0]), argv[1], argv[2], int(argv[3])
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_client(port, path, cookie, sockets))


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ws_round(server_cmd: list[str], tmp: Path, cookie: str, rid: str, sockets: int, events: int, gap: float,
             profile: Path | None = None) -> dict:
    """One measurement: a fresh server process, `sockets` clients watching
    request `rid` (in their own process), `events` progress events published
    `gap` seconds apart. Latency of an event on a socket: from its PUBLISH to
    the first message on that socket showing that progress or later."""
    import redis as redis_lib

    from queueadmin.core import services

    eng = services.engine()
    r = redis_lib.Redis.from_url(os.environ["REDIS_URL"])
    meta = eng.keys.request(rid).meta
    r.hset(meta, "done", 0)
    server, port = start_server(server_cmd, tmp if profile is None else profile.with_suffix(".log"))
    client = spy = None

    def py_spy(out: Path) -> subprocess.Popen:
        spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(server.pid),
                                "--rate", "250", "--format", "raw", "--output", str(out), "--nonblocking"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # py-spy attaches
        return spy

    def py_spy_stop(spy: subprocess.Popen | None) -> None:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)

    try:
        if profile is not None:
            spy = py_spy(profile.with_name(profile.stem + "-connect.txt"))
        client = subprocess.Popen([sys.executable, __file__, "_client", str(port), f"/ws/live/?topic=request:{rid}::",
                                   cookie, str(sockets)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        ready = client.stdout.readline().split()
        if not ready or ready[0] != "ready":
            raise RuntimeError(f"client failed: {ready}")
        connect_s = float(ready[1])
        py_spy_stop(spy)
        time.sleep(1.0)
        if profile is not None:
            spy = py_spy(profile)
        published: dict[int, float] = {}
        cpu0, wall0 = proc_cpu(server.pid), time.monotonic()
        client.stdin.write(f"go {events}\n")
        client.stdin.flush()
        for n in range(1, events + 1):
            r.hset(meta, "done", n)
            published[n] = time.monotonic()
            r.publish(eng.channel, f'{{"type":"progress","id":"{rid}","done":{n},"t":{int(time.time() * 1000)}}}')
            time.sleep(gap)
        if select.select([client.stdout], [], [], 10.0)[0]:
            client.stdout.readline()  # "complete"
        server_cpu, wall = proc_cpu(server.pid) - cpu0, time.monotonic() - wall0
        py_spy_stop(spy)
        client.stdin.write("end\n")
        client.stdin.flush()
        result = json.loads(client.stdout.readline())
        client.wait(30)
    finally:
        for p in (spy, client):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        stop(server)
    latencies = []
    complete = 0
    for seen in result["seen"]:
        got = sorted((int(k), v) for k, v in seen.items())
        n = 1
        for done, t in got:
            while n <= done:
                latencies.append((t - published[n]) * 1000)
                n += 1
        complete += bool(got) and got[-1][0] >= events
    return {"connect_s": connect_s, "samples": len(latencies), "p50": pct(latencies, 50), "p99": pct(latencies, 99),
            "max": max(latencies) if latencies else float("nan"), "complete": complete,
            "expected": sockets * events, "server_cpu": server_cpu / wall, "client_cpu": result["cpu_s"] / wall,
            "cpu_per_event": server_cpu / events * 1000, "deflate": result["deflate"]}


# The ASGI servers this benchmark can measure. "uvicorn" is bin/run's command
# line (keep the two in step); the others differ from it in one thing each.
def _uvicorn(loop="uvloop", http="httptools", ws="websockets-sansio", deflate=False) -> list[str]:
    return ["{bin}/uvicorn", "--host", "127.0.0.1", "--port", "{port}", "--loop", loop, "--http", http, "--ws", ws,
            "--ws-per-message-deflate", str(deflate).lower(), "--lifespan", "off", "--no-proxy-headers",
            "--timeout-graceful-shutdown", "5", "queueadmin.asgi:application"]


SERVERS = {
    "uvicorn": _uvicorn(),
    "uvicorn-asyncio": _uvicorn(loop="asyncio", http="h11"),  # no uvloop, no httptools
    "uvicorn-wsproto": _uvicorn(ws="wsproto"),  # needs `pip install wsproto`
    "uvicorn-deflate": _uvicorn(deflate=True),  # what browsers get when the server accepts permessage-deflate
    "daphne": ["{bin}/daphne", "-b", "127.0.0.1", "-p", "{port}", "queueadmin.asgi:application"],
}
DEFAULT_SERVER = "uvicorn"


def start_server(cmd: list[str], log_path: Path) -> tuple[subprocess.Popen, int]:
    """Start an ASGI server on a free loopback port (its output in log_path, or
    in log_path/server.log when that is a folder) and wait until it answers."""
    from queueadmin.core import embedded

    port = embedded.free_port()
    argv = [a.format(bin=Path(sys.executable).parent, port=port) for a in cmd]
    if log_path.is_dir():
        log_path = log_path / "server.log"
    log = open(log_path, "ab")
    proc = subprocess.Popen(argv, cwd=ROOT, env=os.environ.copy(), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=1).read()
            return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(proc)
                raise RuntimeError(log_path.read_text())
            time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def session_cookie() -> str:
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    user = bench_user()
    s = SessionStore()
    s[SESSION_KEY] = str(user.pk)
    s[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    s[HASH_SESSION_KEY] = user.get_session_auth_hash()
    s.save()
    return f"{settings.SESSION_COOKIE_NAME}={s.session_key}"


def main():
    if sys.argv[1:2] == ["_client"]:
        return client_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--sockets", type=int, default=500)
    ap.add_argument("--events", type=int, default=20)
    ap.add_argument("--gap", type=float, default=0.3, help="seconds between published events")
    ap.add_argument("--runs", type=int, default=15, help="timed runs of each page")
    ap.add_argument("--rounds", type=int, default=3, help="WebSocket rounds per server (medians are reported)")
    ap.add_argument("--server", action="append", choices=sorted(SERVERS),
                    help=f"ASGI server(s) to measure (default: {DEFAULT_SERVER}, the one bin/run starts); repeatable")
    ap.add_argument("--no-pages", action="store_true", help="skip the page timings")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="py-spy the server during each round's events (raw collapsed stacks in DIR, "
                         "with the server's log: run with QUEUEADMIN_LOG_LEVEL=DEBUG for the relay's timings)")
    args = ap.parse_args()
    servers = args.server or [DEFAULT_SERVER]
    load = [os.getloadavg()[0]]
    results: dict[str, list[dict]] = {name: [] for name in servers}
    with tempfile.TemporaryDirectory(prefix="qa-bench-") as d:
        tmp = Path(d)
        redis_proc = setup(tmp)
        try:
            sample, big = populate(args.requests, args.items)
            rows = [] if args.no_pages else time_pages(sample, big, args.runs)
            cookie = session_cookie()
            for n in range(args.rounds):  # servers interleaved, so that load from elsewhere spreads over all
                for name in servers:
                    profile = None
                    if args.profile:
                        args.profile.mkdir(parents=True, exist_ok=True)
                        profile = args.profile / f"{name}-{n + 1}.txt"
                    res = ws_round(SERVERS[name], tmp, cookie, big, args.sockets, args.events, args.gap, profile)
                    results[name].append(res)
                    print(f"round {n + 1} {name}: p50 {res['p50']:.0f} ms, p99 {res['p99']:.0f} ms, "
                          f"server CPU {res['server_cpu']:.0%}, client CPU {res['client_cpu']:.0%}, "
                          f"load {os.getloadavg()[0]:.1f}", file=sys.stderr)
        finally:
            from queueadmin.core import embedded

            embedded.stop(redis_proc)
    load.append(os.getloadavg()[0])
    print(f"\nqueueadmin dashboard benchmark — {args.requests:,} requests queued, {args.items:,} items pending, "
          f"{os.cpu_count()} CPUs, load average {load[0]:.1f} at start, {load[1]:.1f} at end\n")
    if rows:
        print(f"| {'measure':<42} | {'median':>9} | {'p95':>9} | goal     |")
        print(f"|{'-' * 44}|{'-' * 11}|{'-' * 11}|----------|")
        for name, med, p95 in rows:
            print(f"| {name:<42} | {med:>6.1f} ms | {p95:>6.1f} ms | < 100 ms |")
        print()
    w = max(17, *(len(s) for s in servers), *(4 * args.rounds - 1 for s in servers))
    med = lambda name, key: statistics.median(r[key] for r in results[name])  # noqa: E731
    title = (f"{args.sockets} WebSockets on one request, one server process, "
             f"{args.events} events {args.gap * 1000:.0f} ms apart, median of {args.rounds} round(s)")
    print(title)
    print()
    print(f"| {'measure':<42} | " + " | ".join(f"{s:>{w}}" for s in servers) + " | goal     |")
    print(f"|{'-' * 44}|" + "|".join("-" * (w + 2) for _ in servers) + "|----------|")

    def line(label, cells, goal=""):
        print(f"| {label:<42} | " + " | ".join(f"{c:>{w}}" for c in cells) + f" | {goal:<8} |")

    line("connect + first state, all sockets", [f"{med(s, 'connect_s'):.1f} s" for s in servers])
    line("publish-to-socket latency p50", [f"{med(s, 'p50'):.0f} ms" for s in servers])
    line("publish-to-socket latency p99", [f"{med(s, 'p99'):.0f} ms" for s in servers], "< 250 ms")
    line("  p99 of each round", ["/".join(f"{r['p99']:.0f}" for r in results[s]) for s in servers])
    line("publish-to-socket latency max", [f"{med(s, 'max'):.0f} ms" for s in servers])
    line("updates delivered (socket x event)",
         [f"{min(r['samples'] for r in results[s]):,}/{results[s][0]['expected']:,}" for s in servers])
    line("sockets that saw the final state",
         [f"{min(r['complete'] for r in results[s]):,}/{args.sockets:,}" for s in servers], "all")
    line(f"server CPU per event (render + {args.sockets} sends)", [f"{med(s, 'cpu_per_event'):.0f} ms" for s in servers])
    line("server CPU while publishing (1 core = 100%)", [f"{med(s, 'server_cpu'):.0%}" for s in servers])
    line("client CPU (own process)", [f"{med(s, 'client_cpu'):.0%}" for s in servers])
    line("sockets with permessage-deflate", [f"{min(r['deflate'] for r in results[s]):,}" for s in servers])


if __name__ == "__main__":
    main()
