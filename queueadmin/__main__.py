"""`python -m queueadmin ...`: the `queueadmin` command (queueadmin/cli.py)."""
from queueadmin.cli import main

main()
