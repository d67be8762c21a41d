"""Instructions counted instead of time: a process run under Valgrind's
callgrind, whose counters are zeroed before a stretch of work and read after
it. On this machine's 2 shared cores the same drain's time moves by 15%
from run to run; the instructions Redis executes for it move by under 1%.
A counted process runs about 50 times slower, so counts are taken on small
drains. Not a test.

    server = RedisServer(wrap=callgrind.wrap(out_dir))   # redis-server counted
    counter = callgrind.Counter(server.proc.pid, out_dir)
    counter.zero(); ...; instructions = counter.read()
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from install import _apt_install


def available(log) -> bool:
    """Valgrind's callgrind and callgrind_control, installed with apt-get when missing."""
    if shutil.which("callgrind_control") and shutil.which("valgrind"):
        return True
    log("# valgrind missing: apt-get install -y valgrind")
    return _apt_install("valgrind") and bool(shutil.which("callgrind_control"))


def wrap(out_dir: Path) -> list[str]:
    """The command prefix that runs a program counted, its dumps in `out_dir`
    (one file per dump, named by pid and dump number)."""
    return ["valgrind", "--tool=callgrind", "--quiet", f"--callgrind-out-file={out_dir}/cg.%p"]


class Counter:
    """The instruction counter of one running process under `wrap`."""

    def __init__(self, pid: int, out_dir: Path):
        self.pid, self.out_dir = pid, Path(out_dir)

    def zero(self) -> None:
        self._control("-z")

    def read(self) -> int:
        """Instructions executed since the last zero (a dump, then its total)."""
        before = set(self.out_dir.glob(f"cg.{self.pid}.*"))
        self._control("-d")
        dumps = set(self.out_dir.glob(f"cg.{self.pid}.*")) - before
        if len(dumps) != 1:
            raise RuntimeError(f"callgrind wrote {len(dumps)} dumps for pid {self.pid}")
        dump = dumps.pop()
        total = _total(dump.read_text())
        dump.unlink()
        return total

    def _control(self, flag: str) -> None:
        subprocess.run(["callgrind_control", flag, str(self.pid)], check=True, capture_output=True, timeout=120)


def _total(text: str) -> int:
    for line in reversed(text.splitlines()):
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise RuntimeError("a callgrind dump without totals")


def self_counter(out_dir: Path) -> Counter | None:
    """This process's counter when it runs under `wrap` (else None)."""
    return Counter(os.getpid(), out_dir) if os.environ.get("QA_CALLGRIND") else None
