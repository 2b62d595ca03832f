"""The install layout: one `ropesplit` namespace over the top-level folders."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed_for_installation():
    """A folder with __init__.py that pyproject does not list would be missing
    from a non-editable install (wheel), though the editable one hides it."""
    cfg = _setuptools()
    dirs = cfg["package-dir"]
    found = set()
    for top, folder in dirs.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if any(part.startswith((".", "_")) for part in rel.parts):
                continue
            name = ".".join([top, *rel.parts])
            # a sub-folder mapped elsewhere is reported under its own mapping
            if name in dirs and top != name:
                continue
            found.add(name)
    assert found <= set(cfg["packages"]), sorted(found - set(cfg["packages"]))


def test_no_bare_top_level_modules_named_like_pypi_packages():
    """PyPI already has `numerics` and `empirical`: they must install only
    under the ropesplit namespace."""
    cfg = _setuptools()
    assert all(name == "ropesplit" or name.startswith("ropesplit.") for name in cfg["packages"])


def test_theory_imports_no_numpy_or_torch():
    import subprocess
    import sys

    code = (
        "import sys, ropesplit.theory; "
        "bad = [m for m in ('numpy', 'torch', 'transformers') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_numerics_never_imports_transformers():
    import subprocess
    import sys

    code = (
        "import sys, ropesplit.numerics; "
        "import pkgutil, importlib; "
        "[importlib.import_module('ropesplit.numerics.' + m.name) "
        " for m in pkgutil.iter_modules(ropesplit.numerics.__path__)]; "
        "print('transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
