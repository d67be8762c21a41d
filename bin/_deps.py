"""Print the requirement ranges pyproject.toml declares (the dependencies and
the extras named on the command line), one per line, for `pip install
--upgrade`: bin/test's pass on the newest releases within those ranges."""
import sys
import tomllib
from pathlib import Path

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
wanted = list(project["dependencies"])
for extra in sys.argv[1:]:
    wanted += [r for r in project["optional-dependencies"][extra] if not r.startswith("queueadmin")]
print("\n".join(dict.fromkeys(wanted)))
