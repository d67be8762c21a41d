"""Processors used by the engine tests (registered through
QUEUEADMIN_EXTRA_PROCESSORS in worker subprocesses, or directly in-process)."""
import os
import time


def stall_first(item, ctx):
    """Attempt 1 sleeps past any short lease; later attempts return at once."""
    if ctx.attempt == 1:
        time.sleep(float(item))
    return ctx.attempt


def extend_and_sleep(item, ctx):
    """Extends its lease, then sleeps longer than the original lease."""
    ctx.extend_lease(10)
    time.sleep(float(item))
    return ctx.attempt


def fail_until_third(item, ctx):
    if ctx.attempt < 3:
        raise ValueError(f"attempt {ctx.attempt} fails")
    return "ok"


def crash(item):
    """Kills its own worker process, like a segfault would (a poison item)."""
    os._exit(17)


def flaky_switch(item):
    """Fails while the file named by the item exists."""
    if os.path.exists(item):
        raise RuntimeError("switch is on")
    return "ok"
