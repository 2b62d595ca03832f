"""Write the lock: the exact version of every package a venv holds, as pip constraints.

    python tools/lock.py VENV_PYTHON > constraints.txt

Reads ``pip freeze`` of the given interpreter (the project itself, installed
editable, left out), drops local version labels (``torch==2.13.0+cpu`` ->
``torch==2.13.0``: the public version matches the CPU build and the index
one alike) and heads the file with the date and the Python it was resolved
with. ``make lock`` calls it on a venv resolved afresh from the index.
"""

from __future__ import annotations

import datetime
import subprocess
import sys


def lock(python: str) -> str:
    frozen = subprocess.run([python, "-m", "pip", "freeze", "--exclude-editable"],
                            check=True, capture_output=True, text=True).stdout  # fmt: skip
    version = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                             check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    pins = sorted((line.split("+")[0] for line in frozen.splitlines()
                   if "==" in line and not line.startswith("ropesplit")),
                  key=str.lower)  # fmt: skip
    today = datetime.date.today().isoformat()
    head = [f"# ropesplit's lock: resolved {today} with Python {version} by `make lock`.",
            "# `make test` and `make report` install exactly these; pyproject.toml keeps the",
            "# ranges for `pip install` into your own environment."]  # fmt: skip
    return "\n".join(head + pins) + "\n"


def floors(pyproject: str, extras: tuple[str, ...]) -> str:
    """``name==floor`` for each ``name>=floor`` dependency of the package and ``extras``."""
    import re
    import tomllib

    with open(pyproject, "rb") as fh:
        project = tomllib.load(fh)["project"]
    deps = list(project["dependencies"])
    for extra in extras:
        deps += project["optional-dependencies"][extra]
    out = []
    for dep in deps:
        match = re.match(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)", dep)
        if match:
            out.append(f"{match.group(1)}=={match.group(3)}")
    return "\n".join(sorted(out, key=str.lower)) + "\n"


if __name__ == "__main__":
    if sys.argv[1] == "--floors":  # python tools/lock.py --floors pyproject.toml EXTRA...
        sys.stdout.write(floors(sys.argv[2], tuple(sys.argv[3:])))
    else:
        sys.stdout.write(lock(sys.argv[1]))
