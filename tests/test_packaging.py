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


# ---------------------------------------------------------- import edges between layers (issue 9)

LAYER_FOLDERS = {"theory": "ropesplit.theory", "numerics": "ropesplit.numerics",
                 "empirical": "ropesplit.empirical", "ropesplit": "ropesplit"}  # fmt: skip
# every layer may import the ground floor: errors, io, the paper's numbers and the claims
# registry (issue 31); it imports no layer
BASE = {"ropesplit.core"}
ALLOWED = {
    "ropesplit.core": set(),
    "ropesplit.theory": BASE,
    "ropesplit.numerics": BASE | {"ropesplit.theory"},
    "ropesplit.empirical": BASE | {"ropesplit.theory", "ropesplit.numerics"},
    "ropesplit.figures": BASE | {"ropesplit.theory", "ropesplit.numerics", "ropesplit.empirical"},
    "ropesplit.report": BASE | {"ropesplit.theory", "ropesplit.numerics", "ropesplit.empirical",
                                "ropesplit.figures"},
    "ropesplit.commands": BASE | {"ropesplit.theory", "ropesplit.numerics",
                                  "ropesplit.empirical", "ropesplit.figures", "ropesplit.report"},
    "ropesplit.cli": BASE | {"ropesplit", "ropesplit.commands"},
    "ropesplit.__main__": {"ropesplit.cli"},
    "ropesplit": BASE,  # the package's __init__
}  # fmt: skip


def _layer(module: str) -> str | None:
    """``ropesplit.numerics.stats`` -> ``ropesplit.numerics``; None outside ropesplit."""
    parts = module.split(".")
    if parts[0] != "ropesplit":
        return None
    return ".".join(parts[:2])


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in a file, ``from ropesplit import x`` as
    ``ropesplit.x`` when ``x`` is a module or package."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "ropesplit":
                for alias in node.names:
                    sub = ROOT / "ropesplit" / alias.name
                    is_module = sub.is_dir() or sub.with_suffix(".py").is_file()
                    found.append((node.lineno, f"ropesplit.{alias.name}" if is_module
                                  else "ropesplit"))  # fmt: skip
            else:
                found.append((node.lineno, node.module))
    return found


def _edges() -> list[tuple[str, str, str]]:
    """(source layer, target layer, where) for every import across layers."""
    edges = []
    for folder, package in LAYER_FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            module = ".".join([package, *rel.parts]).removesuffix(".__init__")
            source = package if folder != "ropesplit" else (_layer(module) or module)
            for line, target in _imports(path):
                layer = _layer(target)
                if layer is not None and layer != source:
                    edges.append((source, layer, f"{path.relative_to(ROOT)}:{line}"))
    return edges


def test_layers_import_only_what_their_place_allows():
    """theory <- numerics <- empirical <- figures <- report <- commands <- cli: no edge
    points up (e.g. empirical never imports figures, report or commands)."""
    edges = _edges()
    sources = {source for source, _, _ in edges}
    assert sources <= set(ALLOWED), sorted(sources - set(ALLOWED))  # a new layer: add its row
    bad = [f"{where}: {source} imports {target}" for source, target, where in edges
           if target not in ALLOWED[source]]  # fmt: skip
    assert not bad, "\n".join(bad)


def test_the_edge_check_sees_a_forbidden_import(tmp_path, monkeypatch):
    """The check can fail: an upward import planted in a copy of a layer is reported."""
    import shutil

    fake = tmp_path / "numerics"
    shutil.copytree(ROOT / "numerics", fake)
    (fake / "planted.py").write_text("from ropesplit.empirical import capture\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path, raising=False)
    monkeypatch.setitem(LAYER_FOLDERS, "numerics", "ropesplit.numerics")
    for folder in ("theory", "empirical", "ropesplit"):
        monkeypatch.delitem(LAYER_FOLDERS, folder)
    edges = [(s, t) for s, t, where in _edges() if where.endswith("planted.py:1")]
    assert edges == [("ropesplit.numerics", "ropesplit.empirical")]
