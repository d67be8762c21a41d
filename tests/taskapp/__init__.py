"""An example app for the tests: Django tasks (tasks.py) and decorated
processors (processors.py). Installed only by the tests that use it (and in
their worker processes, through QUEUEADMIN_EXTRA_APPS)."""
