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


def block_in_c(item):
    """One long call into C (time.sleep): an interrupt cannot land until it
    returns, so only replacing the process frees the slot."""
    time.sleep(float(item))
    return item


def record_pid(item):
    return os.getpid()


def fast_or_block(item):
    """Quick, except the item "block", which blocks in C for an hour."""
    if item == "block":
        time.sleep(3600)
    return item


def chatty(item, ctx):
    """Logs through ctx.log and the logging module, reports progress, then
    sleeps `item` seconds (so the progress can be seen while it runs)."""
    import logging

    ctx.log(f"starting {item}")
    logging.getLogger("tests.chatty").info("a logging call inside the handler")
    logging.getLogger("tests.chatty").debug("below INFO: not kept")
    ctx.progress(0.5, "halfway")
    time.sleep(float(item))
    return "ok"


def flood_log(item, ctx):
    for n in range(int(item)):
        ctx.log(f"line {n} " + "x" * 100)
    return n


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text for you")


def poison(item, ctx):
    """Returns, raises or logs what no record can hold as it is (issue 20):
    "deep" nests 5000 lists (past Python's recursion limit), "nan", "set",
    "surrogate", "cycle", "unprintable" (an exception whose text raises),
    "exit" (SystemExit, as argparse does), "log" (a lone surrogate logged);
    anything else comes back as it is."""
    import sys

    if item == "deep":
        return _deep(5000)
    if item == "log":
        ctx.log("half a pair: \ud800")
        return "logged"
    if item == "cycle":
        loop = []
        loop.append(loop)
        return loop
    if item == "unprintable":
        raise _Unprintable()
    if item == "exit":
        sys.exit(2)
    return {"nan": float("nan"), "set": {1, 2}, "surrogate": "\udc80"}.get(item, item)


def _deep(n):
    out = []
    for _ in range(n):
        out = [out]
    return out
