"""The parts of the build that pyproject.toml cannot say: the package list
(core/'s subpackages, mapped under queueadmin.core) and the dashboard's
front-end files, htmx and its WebSocket extension, taken from npm at build
time (bin/frontend) and put into the wheel as the app's static files. Nothing
of them is committed, nothing is fetched at run time, and a user's machine
needs no npm: only building the wheel does."""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
VENDOR = ("htmx.min.js", "ws.min.js")


def packages() -> list[str]:
    found = ["queueadmin", "queueadmin.lua"]
    for top, name in (("queueadmin", "queueadmin"), ("core", "queueadmin.core")):
        for init in sorted((ROOT / top).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / top)
            if "__pycache__" not in rel.parts and "templates" not in rel.parts:
                found.append(".".join([name, *rel.parts]) if rel.parts else name)
    return sorted(set(found))


def frontend() -> Path:
    """A folder holding htmx.min.js and ws.min.js: the checkout's (bin/frontend
    made it), else one bin/frontend makes now in the build's temporary folder."""
    here = Path(os.environ.get("QUEUEADMIN_VAR", ROOT / "var")) / "frontend" / "dist"
    if all((here / name).is_file() for name in VENDOR):
        return here
    dest = ROOT / "build" / "frontend"
    subprocess.run(["bash", str(ROOT / "bin" / "frontend"), str(dest)], check=True)
    return dest / "dist"


class BuildWithFrontend(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "queueadmin" / "core" / "static" / "queueadmin" / "vendor"
        target.mkdir(parents=True, exist_ok=True)
        source = frontend()
        for name in VENDOR:
            shutil.copyfile(source / name, target / name)


setup(packages=packages(), cmdclass={"build_py": BuildWithFrontend})
