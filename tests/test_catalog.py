"""Processors by decorator (core/catalog.py, core.engine.processors.catalog)
and the system checks on processors (core/checks.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core import checks

from queueadmin.core import conf
from queueadmin.core import checks as qa_checks
from queueadmin.core import services
from queueadmin.core.catalog import clashes, processor
from queueadmin.core.engine.runtime.processors import Catalog, Processors, catalog
from queueadmin.core.forms import processor_choices

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def own_catalog(monkeypatch):
    """Registrations made by the test are forgotten afterwards."""
    monkeypatch.setattr(catalog, "functions", dict(catalog.functions))
    monkeypatch.setattr(catalog, "conflicts", {k: set(v) for k, v in catalog.conflicts.items()})


@pytest.fixture
def installed(settings, redis_url):
    """The example app installed; its processors join a copy of the settings map."""
    def install(*apps, processors=None):
        settings.QUEUEADMIN = {**settings.QUEUEADMIN,
                               "PROCESSORS": {**settings.QUEUEADMIN["PROCESSORS"], **(processors or {})}}
        settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, *apps]
        services.reset()
        return conf.processors()
    return install


def run_checks() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for msg in checks.run_checks(tags=["queueadmin"]):
        out.setdefault(msg.id, []).append(msg.msg)
    return out


@pytest.mark.django_db
def test_autodiscovered_processors_join_the_one_list_everyone_reads(installed):
    paths = installed("tests.taskapp")
    assert paths["taskapp.double"] == "tests.taskapp.processors.double"
    assert paths["tests.taskapp.processors.triple"] == "tests.taskapp.processors.triple"  # bare @processor
    assert ("taskapp.double", "taskapp.double") in processor_choices()  # the dashboard's form
    services.engine().define_queue("default")
    assert services.submit("default", "taskapp.double", [2]).id  # the engine's submission check
    fn, takes_ctx = Processors(paths).get("taskapp.double")
    assert fn(21) == 42 and not takes_ctx
    assert Processors(paths).get("tests.taskapp.processors.triple")[1]  # takes the item's context


def test_a_name_in_the_settings_map_keeps_its_path_and_the_clash_is_reported(installed):
    paths = installed("tests.taskapp", processors={"taskapp.double": "queueadmin.core.engine.runtime.processors.echo"})
    assert paths["taskapp.double"] == "queueadmin.core.engine.runtime.processors.echo"
    assert clashes()["taskapp.double"] == ["queueadmin.core.engine.runtime.processors.echo", "tests.taskapp.processors.double"]
    assert any("taskapp.double" in m for m in run_checks()["queueadmin.E002"])


def test_two_functions_under_one_name_are_a_duplicate(own_catalog, installed):
    installed("tests.taskapp")

    def double(item):  # a second "taskapp.double"
        return item

    processor("taskapp.double")(double)
    assert catalog.functions["taskapp.double"].__module__ == "tests.taskapp.processors"  # the first one stays
    found = run_checks()["queueadmin.E002"]
    assert len(found) == 1 and "test_catalog" in found[0]


def test_check_reports_processors_that_cannot_run(installed, monkeypatch):
    installed(processors={"broken": "tests.taskapp.nowhere.nothing", "typo": "queueadmin.core.engine.runtime.processors.ecco",
                          "gen": "tests.taskapp.bad.generate", "number": "tests.taskapp.bad.not_callable"})
    found = run_checks()
    assert sorted(m.split("'")[1] for m in found["queueadmin.E001"]) == ["broken", "number", "typo"]
    assert [m.split("'")[1] for m in found["queueadmin.E003"]] == ["gen"]
    assert "queueadmin.W003" not in found or not qa_checks.async_supported()

    monkeypatch.setattr(qa_checks, "async_supported", lambda: False)  # an engine without the event loop
    assert "'async_sleep'" in " ".join(run_checks()["queueadmin.W003"])


def test_manage_py_check_fails_on_a_broken_path_and_a_duplicate(tmp_path):
    env = {**os.environ, "DATABASE_PATH": str(tmp_path / "db.sqlite3"),
           "QUEUEADMIN_EXTRA_APPS": "tests.taskapp,tests.taskapp.clash",
           "QUEUEADMIN_EXTRA_PROCESSORS": json.dumps({"broken": "nowhere.nothing"})}
    done = subprocess.run([sys.executable, "manage.py", "check", "--tag", "queueadmin"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "queueadmin.E001" in done.stderr and "'broken'" in done.stderr
    assert "queueadmin.E002" in done.stderr and "tests.taskapp.clash.processors.double_again" in done.stderr

    env.pop("QUEUEADMIN_EXTRA_PROCESSORS")
    env["QUEUEADMIN_EXTRA_APPS"] = "tests.taskapp"
    ok = subprocess.run([sys.executable, "manage.py", "check", "--tag", "queueadmin"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr


def test_catalog_names():
    cat = Catalog()

    def f(item):
        return item

    for bad in ("", " ", "x" * 101, None):
        with pytest.raises(ValueError):
            cat.register(bad, f)
    cat.register("f", f)
    cat.register("f", f)  # the same function again (a module imported twice) is no clash
    assert cat.functions == {"f": f} and cat.conflicts == {}
    assert Processors({}, catalog=cat).names() == ["f"] and "f" in Processors({}, catalog=cat)
