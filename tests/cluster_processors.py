"""Processors for the cluster tests: every execution is logged, so that a test
can count how often each item really ran (duplicates after a failover)."""
import os
import time


def logged(item):
    """Append the item to $QA_EXEC_LOG/<pid>.log, sleep a little, return it."""
    with open(os.path.join(os.environ["QA_EXEC_LOG"], f"{os.getpid()}.log"), "a") as f:
        f.write(f"{item}\n")
    time.sleep(0.002)
    return item
