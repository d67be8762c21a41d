#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")
    if sys.argv[1:2] == ["queue_worker"]:
        # workers serve before Django is set up (it sets up beside them): core/launch.py
        from core.launch import main as queue_worker

        code = queue_worker(sys.argv[2:])
        if code is not None:
            sys.exit(code)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
