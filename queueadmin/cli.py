"""The `queueadmin` command (installed with the package) and the
repository's manage.py.

    queueadmin run [--port 8000] [--processes 2] [--data-dir DIR]
        the whole standalone system: dashboard, workers, embedded Redis
    queueadmin COMMAND ...
        any management command of the standalone service (queue_worker,
        queue_submit, queue_status, createsuperuser, migrate, ...)

The standalone service's settings are queueadmin.settings (DJANGO_SETTINGS_MODULE
may name others); its data folder is QUEUEADMIN_VAR, by default var/ in a
checkout and $XDG_DATA_HOME/queueadmin (~/.local/share/queueadmin) when
installed. A project of your own runs the same commands with its manage.py.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from queueadmin import __version__

SETTINGS = "queueadmin.settings"


def data_dir() -> Path:
    """Where the standalone service keeps its database, keys and Redis data."""
    if os.environ.get("QUEUEADMIN_VAR"):
        return Path(os.environ["QUEUEADMIN_VAR"]).resolve()
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "manage.py").is_file() and (checkout / "core").is_dir():
        return checkout / "var"
    home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return home / "queueadmin"


def manage(argv: list[str]) -> None:
    """Run a management command, the workers' fast start included."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS)
    os.environ.setdefault("QUEUEADMIN_VAR", str(data_dir()))
    os.umask(0o077)  # whichever command first writes the database or a key, it is private (as under `run`)
    if argv[1:2] == ["queue_worker"]:
        # workers serve before Django is set up (it sets up beside them): core/launch.py
        from queueadmin.core.launch import main as queue_worker

        code = queue_worker(argv[2:])
        if code is not None:
            sys.exit(code)
    from django.core.management import execute_from_command_line  # after the environment above is set

    execute_from_command_line(argv)


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="queueadmin run", description="Run the dashboard, workers and "
                                     "(unless REDIS_URL is set) an embedded Redis until Ctrl-C.")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")),
                        help="the dashboard's port on 127.0.0.1 (default: $PORT or 8000)")
    parser.add_argument("--processes", type=int, default=int(os.environ.get("QUEUEADMIN_WORKER_PROCESSES", "2")),
                        help="worker processes (default: $QUEUEADMIN_WORKER_PROCESSES or 2)")
    parser.add_argument("--redis-port", type=int, default=int(os.environ.get("QUEUEADMIN_REDIS_PORT", "6390")),
                        help="the embedded Redis's port when REDIS_URL is not set (default 6390)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help=f"database, keys and Redis data (default: {data_dir()})")
    opts = parser.parse_args(argv)
    if opts.processes < 1:
        parser.error("--processes must be at least 1")
    from queueadmin import service  # only for `run`: the other commands start without it

    return service.run((opts.data_dir or data_dir()).resolve(), opts.port, opts.redis_port, opts.processes)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    if argv[1:2] == ["run"]:
        sys.exit(run(argv[2:]))
    if argv[1:2] in (["--version"], ["version"]):
        print(__version__)
        return
    manage(["queueadmin", *argv[1:]])
