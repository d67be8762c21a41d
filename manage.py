#!/usr/bin/env python
"""The standalone service's management commands, from a checkout (installed,
the `queueadmin` command does the same: queueadmin/cli.py)."""
import sys

if __name__ == "__main__":
    from queueadmin.cli import manage

    manage(sys.argv)
