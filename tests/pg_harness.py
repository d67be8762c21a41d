"""A throw-away PostgreSQL cluster for tests: `initdb` in a temp dir, the
server on a free loopback port with its unix socket in that dir, trust auth
for one superuser role (which may create the test databases), torn down at
the end. Started the way tests/conftest.py starts redis-server.

    with LocalPostgres() as pg:
        pg.url("queueadmin")    # postgres://queueadmin@127.0.0.1:PORT/queueadmin
        pg.create_database("x")

PostgreSQL refuses to run as root (CI runs as root): then initdb and the
server run as the unprivileged user `nobody`, in a temp dir it owns.
Binaries are found on PATH or under /usr/lib/postgresql/*/bin (Debian);
bin/test installs the `postgresql` package when they are missing.

    python -m tests.pg_harness      # start one, print DATABASE_URL, Ctrl-C stops it
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from queueadmin.core import embedded

ROLE = "queueadmin"
RUN_AS_WHEN_ROOT = "nobody"


def bindir() -> Path:
    """The directory with initdb and postgres (newest Debian version first)."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if not candidates:
        raise FileNotFoundError("PostgreSQL's initdb not found (on PATH or /usr/lib/postgresql/*/bin): "
                                "install it with `apt-get install -y postgresql` (bin/test does)")
    return Path(candidates[-1]).parent


class LocalPostgres:
    def __init__(self, port: int | None = None):
        self.port = port or embedded.free_port()
        self.bin = bindir()
        self.user = RUN_AS_WHEN_ROOT if os.geteuid() == 0 else None
        self.dir: Path | None = None
        self.proc: subprocess.Popen | None = None

    # -- lifecycle ------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> "LocalPostgres":
        # not under pytest's tmp dirs: those are 0700 root-only, and `nobody` must reach its own
        self.dir = Path(tempfile.mkdtemp(prefix="qa-pg-"))
        try:
            if self.user:
                ids = pwd.getpwnam(self.user)
                os.chown(self.dir, ids.pw_uid, ids.pw_gid)
            self._run([str(self.bin / "initdb"), "-D", str(self.data), "-U", ROLE, "--auth=trust",
                       "--encoding=UTF8", "--locale=C", "--no-sync"])
            log = open(self.dir / "postgres.log", "ab")
            self.proc = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.dir}",
                 # a test database: speed over durability
                 "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                 "-c", "max_connections=200", "-c", "shared_buffers=32MB"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **self._as_user())
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast" shutdown: disconnect clients, stop
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> "LocalPostgres":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- use --------------------------------------------------------------------

    @property
    def data(self) -> Path:
        return self.dir / "data"

    def url(self, dbname: str = ROLE) -> str:
        return f"postgres://{ROLE}@127.0.0.1:{self.port}/{dbname}"

    def settings(self, dbname: str = ROLE) -> dict:
        """A Django DATABASES entry for `dbname`."""
        return {"ENGINE": "django.db.backends.postgresql", "NAME": dbname, "USER": ROLE, "PASSWORD": "",
                "HOST": "127.0.0.1", "PORT": str(self.port)}

    def connect(self, dbname: str = "postgres"):
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user=ROLE, dbname=dbname, autocommit=True,
                               connect_timeout=5)

    def create_database(self, name: str) -> str:
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log(self) -> str:
        path = self.dir / "postgres.log" if self.dir else None
        return path.read_text(errors="replace")[-3000:] if path and path.exists() else ""

    # -- internals --------------------------------------------------------------

    def _as_user(self) -> dict:
        if not self.user:
            return {}
        ids = pwd.getpwnam(self.user)
        # a HOME it may read; cwd the data's parent (the caller's may be root-only)
        return {"user": ids.pw_uid, "group": ids.pw_gid, "extra_groups": [], "cwd": str(self.dir),
                "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.dir), "LC_ALL": "C"}}

    def _run(self, args: list[str]) -> None:
        done = subprocess.run(args, capture_output=True, text=True, **self._as_user())
        if done.returncode:
            raise RuntimeError(f"{' '.join(args[:1])} failed ({done.returncode}):\n{done.stdout}{done.stderr}")

    def _wait_ready(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}:\n{self.log()}")
            try:
                self.connect().close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"postgres on port {self.port} did not answer in {timeout}s:\n{self.log()}")
                time.sleep(0.1)


if __name__ == "__main__":
    with LocalPostgres() as pg:
        pg.create_database(ROLE)
        print(f"DATABASE_URL={pg.url()}", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
