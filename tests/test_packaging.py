"""The install layout: one `ropesplit` namespace over the top-level folders."""

from __future__ import annotations

import ast
import functools
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def _parse(source: str) -> ast.Module:
    """``ast.parse``, once per source text: the checks below each walk every module (read
    only), so each file is parsed once per run instead of once per check."""
    return ast.parse(source)


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


def test_experiment_settings_import_without_torch():
    """``ExperimentSettings`` is plain data: ``empirical/__init__`` and
    ``empirical/experiments/__init__`` import their modules lazily (PEP 562), so importing it
    (as ``ropesplit perturb --help`` and the report's settings do) loads no torch."""
    import subprocess
    import sys

    code = ("import ropesplit.empirical.experiments.settings, sys; "
            "assert 'torch' not in sys.modules, 'torch'; "
            "import ropesplit.empirical as e, ropesplit.empirical.experiments as x; "
            "assert 'torch' not in sys.modules, 'torch (package)'; "
            "assert x.ExperimentSettings is x.settings.ExperimentSettings; "
            "assert set(e.__all__) <= set(dir(e)) and set(x.__all__) <= set(dir(x)); "
            "print('ok')")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr[-2000:]


def test_the_lazy_packages_name_every_public_name():
    """Each name of the lazy ``__all__`` resolves to the object its module defines."""
    import importlib

    for package in ("ropesplit.empirical", "ropesplit.empirical.experiments"):
        module = importlib.import_module(package)
        for name in module.__all__:
            assert getattr(module, name) is not None, (package, name)


def test_frozen_means_frozen_and_no_unpacked_keywords():
    """No module of the package writes a frozen dataclass's field (``object.__setattr__``:
    derived values are properties, or computed before construction) or types ``**kwargs``
    as ``Unpack[...]`` (keywords that belong together are one small frozen dataclass)."""
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for folder in ("theory", "numerics", "empirical", "ropesplit")
             for path in sorted((ROOT / folder).rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if "object.__setattr__" in line or "Unpack[" in line]  # fmt: skip
    assert not found, "\n".join(found)


# -------------------------------------------------------------------- import edges between layers

LAYER_FOLDERS = {"theory": "ropesplit.theory", "numerics": "ropesplit.numerics",
                 "empirical": "ropesplit.empirical", "ropesplit": "ropesplit"}  # fmt: skip
# every layer may import the ground floor: errors, io, the paper's numbers, the outcome
# type; it imports no layer
BASE = {"ropesplit.core"}
ALLOWED = {
    "ropesplit.core": set(),
    "ropesplit.theory": BASE,
    "ropesplit.numerics": BASE | {"ropesplit.theory"},
    # the model-free claims wing: registry, verdicts, records, text on numerics' intervals
    # and pooling (no torch: tests/claims/test_claims.py holds it)
    "ropesplit.claims": BASE | {"ropesplit.numerics"},
    "ropesplit.empirical": BASE | {"ropesplit.theory", "ropesplit.numerics", "ropesplit.claims"},
    # figures draw from plain data: ropesplit.report.figure_data computes it
    "ropesplit.figures": BASE | {"ropesplit.theory", "ropesplit.claims"},
    "ropesplit.report": BASE | {"ropesplit.theory", "ropesplit.numerics", "ropesplit.claims",
                                "ropesplit.empirical", "ropesplit.figures"},
    "ropesplit.commands": BASE | {"ropesplit.theory", "ropesplit.numerics", "ropesplit.claims",
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
    for node in ast.walk(_parse(path.read_text(encoding="utf-8"))):
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
    """theory <- numerics <- empirical <- report <- commands <- cli, figures beside
    numerics and empirical, below report: no edge points up (e.g. empirical never imports
    figures, report or commands) and figures import neither numerics nor empirical."""
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


def test_the_edge_check_sees_a_figure_reaching_for_numerics(tmp_path, monkeypatch):
    """Figures draw only from plain data: a numerics or empirical import planted in a copy of
    the figures package, at module level or inside a function, is reported and refused."""
    import shutil

    fake = tmp_path / "ropesplit"
    shutil.copytree(ROOT / "ropesplit", fake, ignore=shutil.ignore_patterns("__pycache__"))
    (fake / "figures" / "planted.py").write_text(
        "from ropesplit.empirical import capture\n\n\n"
        "def split():\n    from ropesplit.numerics.split import split_head\n"
    )  # fmt: skip
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path, raising=False)
    for folder in ("theory", "numerics", "empirical"):
        monkeypatch.delitem(LAYER_FOLDERS, folder)
    edges = [(s, t, where.rsplit(":", 1)[1]) for s, t, where in _edges()
             if "planted.py" in where]  # fmt: skip
    assert edges == [("ropesplit.figures", "ropesplit.empirical", "1"),
                     ("ropesplit.figures", "ropesplit.numerics", "5")]  # fmt: skip
    assert not {target for _, target, _ in edges} & ALLOWED["ropesplit.figures"]


def _folder(module: str) -> Path:
    """Where a ``ropesplit`` module's package lives: ``ropesplit.numerics`` -> numerics/."""
    top, *rest = module.split(".")[1:] or [""]
    if top in ("theory", "numerics", "empirical"):
        return ROOT.joinpath(top, *rest)
    return ROOT.joinpath("ropesplit", *[part for part in (top, *rest) if part])


def _private_imports(folder: Path, package: str) -> list[str]:
    """``where: module._name`` for each private name imported from another module of the
    package (a private *module* of the importer's own package, e.g. ``numerics._inputs``, is
    allowed: that is what a leading underscore on a file means)."""
    import ast

    bad = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(_parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.startswith("ropesplit")):  # fmt: skip
                continue
            for alias in node.names:
                if not alias.name.startswith("_") or alias.name.startswith("__"):
                    continue
                sub = _folder(node.module)
                if (sub / f"{alias.name}.py").is_file() and path.parent == sub:
                    continue  # a private module of the importer's own package
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{alias.name}")
    return bad


def test_no_module_imports_another_modules_private_names():
    """What one module shares with another has a public name (``stats.tightness``,
    ``rope.check_layout``); a leading underscore means "this module only"."""
    bad = [line for folder, package in LAYER_FOLDERS.items()
           for line in _private_imports(ROOT / folder, package)]  # fmt: skip
    assert not bad, "\n".join(bad)


def test_the_numerics_docstring_names_every_module():
    """``ropesplit.numerics``'s docstring is its map: one line per public module, each there."""
    import re

    import ropesplit.numerics as numerics

    listed = set(re.findall(r"^    ([a-z_]+) ", numerics.__doc__ or "", flags=re.MULTILINE))
    modules = {p.stem for p in (ROOT / "numerics").glob("*.py") if not p.stem.startswith("_")}
    assert modules <= listed, sorted(modules - listed)


ADAPTER = ROOT / "empirical" / "adapter"  # the one package that may reach into transformers


def _reaches_into_transformers(path: Path) -> list[str]:
    """Lines of ``path`` that read ``sys.modules`` or assign to an attribute of a name
    imported from transformers (``setattr(module, ...)`` or ``module.name = ...``)."""
    import ast

    tree = _parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names
                      if a.name.split(".")[0] == "transformers"}  # fmt: skip
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformers"):
            names |= {a.asname or a.name for a in node.names}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr == "modules"
                and isinstance(node.value, ast.Name) and node.value.id == "sys"):  # fmt: skip
            found.append(f"{path.name}:{node.lineno}: sys.modules")
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr":
            targets = node.args[:1]
        for target in targets:
            base = target.value if isinstance(target, ast.Attribute) else target
            if isinstance(base, ast.Name) and base.id in names:
                found.append(f"{path.name}:{node.lineno}: assigns to {base.id}")
    return found


def test_only_the_adapter_reaches_into_transformers():
    """Outside empirical/adapter/ no module reads ``sys.modules`` or assigns to an
    attribute of a transformers module (one adapter: only it breaks when transformers moves)."""
    files = [p for layer in ("theory", "numerics", "empirical", "ropesplit")
             for p in (ROOT / layer).rglob("*.py") if ADAPTER not in p.parents]  # fmt: skip
    found = [line for p in files for line in _reaches_into_transformers(p)]
    assert not found, found


def test_the_reach_check_sees_a_planted_patch(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import sys\nfrom transformers.models.llama import modeling_llama as m\n"
                       "m.apply_rotary_pos_emb = None\nsetattr(m, 'x', 1)\n"
                       "home = sys.modules['x']\n")  # fmt: skip
    assert [line.split(": ", 1)[1] for line in _reaches_into_transformers(planted)] == [
        "assigns to m", "assigns to m", "sys.modules"]


# ---------------------------------------------------------------- config fields: the adapter's

# Reads of a `.config` that is no model's config, each with its reason ("path: expression").
NOT_A_MODEL_CONFIG = {
    "empirical/training/train_setup.py: numba.config.NUMBA_NUM_THREADS":
        "numba's own settings module",
}


def _config_reads(path: Path) -> list[str]:
    """``where: expression`` for each read (or write) of a config field in ``path``: an
    attribute of, or ``getattr``/``hasattr``/``setattr`` on, a config: the name ``config``,
    a name bound to an expression ending ``.config`` or ``.cfg`` (``cfg = loaded.config``,
    ``cfg = model.cfg``), or such an expression itself (``loaded.config.vocab_size``)."""
    import ast

    tree = _parse(path.read_text(encoding="utf-8"))

    def ends_in_config(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr in ("config", "cfg")

    bound = {"config"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if ends_in_config(node.value):
                bound |= {t.id for t in targets if isinstance(t, ast.Name)}

    def is_config(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id in bound) or (
            isinstance(node, ast.Attribute) and node.attr == "config")

    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        read = None
        if isinstance(node, ast.Attribute) and is_config(node.value):
            read = node
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr") and node.args
              and is_config(node.args[0])):  # fmt: skip
            read = node
        if read is not None:
            where = f"{path.relative_to(ROOT).as_posix()}: {ast.unparse(read)}"
            if where not in NOT_A_MODEL_CONFIG:
                found.append((node.lineno, where.replace(": ", f":{node.lineno}: ", 1)))
    return [line for _, line in sorted(found)]


def test_only_the_adapter_reads_config_fields():
    """Outside empirical/adapter/ no module reads a transformers (or TransformerLens) config
    field: each goes through ``empirical.adapter.configs`` (one place breaks when
    transformers renames a field), and ``numerics`` reads only ``RopeSpec``."""
    files = [p for layer in ("theory", "numerics", "empirical", "ropesplit")
             for p in sorted((ROOT / layer).rglob("*.py")) if ADAPTER not in p.parents]  # fmt: skip
    found = [line for p in files for line in _config_reads(p)]
    assert not found, "config fields read outside empirical/adapter/ (use adapter.configs):\n" + (
        "\n".join(found))


def test_the_config_check_sees_a_planted_read(tmp_path, monkeypatch):
    """The check can fail: config reads planted in a module are each reported, a config
    passed on whole is not."""
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path, raising=False)
    planted = tmp_path / "planted.py"
    planted.write_text("def f(loaded, config, model):\n"
                       "    n = loaded.config.vocab_size\n"
                       "    base = getattr(config, 'rope_theta', None)\n"
                       "    cfg = model.cfg\n"
                       "    return n, base, cfg.n_layers, g(loaded.config)\n")  # fmt: skip
    assert _config_reads(planted) == [
        "planted.py:2: loaded.config.vocab_size",
        "planted.py:3: getattr(config, 'rope_theta', None)",
        "planted.py:5: cfg.n_layers",
    ]


# a duration quoted in a docstring: "5.7 s", "0.4 ms", "7.8 min", "3.2 times the time"
_TIMING = re.compile(r"\b\d+(\.\d+)?\s?(ms|s|sec|seconds?|min|minutes?|us|times (faster|slower|"
                     r"the|its|as))\b(?![a-zA-Z])")  # fmt: skip


def _quoted_timings(path: Path) -> list[str]:
    """Docstring lines of ``path`` that quote a timing (``path:line: text``)."""
    out = []
    for node in ast.walk(_parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            out += [f"{path.name}:{getattr(node, 'lineno', 1)}: {line.strip()}"
                    for line in (doc or "").splitlines() if _TIMING.search(line)]  # fmt: skip
    return out


def test_no_docstring_quotes_a_timing():
    """Timings belong to benchmarks/ and the docs pages that date them: one in a docstring
    is read by no test and goes stale as the code and the machine change."""
    found = [hit for layer in ("theory", "numerics", "empirical", "ropesplit")
             for path in sorted((ROOT / layer).rglob("*.py")) for hit in _quoted_timings(path)]
    assert not found, "\n".join(found)


def test_the_timing_check_sees_a_planted_timing(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('def f():\n    """Fast: 0.4 ms a call, 3.2 times the time."""\n')
    assert len(_quoted_timings(planted)) == 1
    planted.write_text('def f():\n    """Fast: 1.6x the other, 512 tokens, 30 layers."""\n')
    assert _quoted_timings(planted) == []


# ------------------------------------------------------------------- the size of a function

MAX_PARAMETERS, MAX_LINES = 8, 80  # issue 47: a newcomer reads a function whole


def _functions(root: Path) -> list[tuple[str, int, int]]:
    """``(where, parameters, lines)`` of every function under the layer folders of ``root``:
    parameters without ``self``/``cls`` (``*args`` and ``**kwargs`` one each), lines from
    ``def`` to the end of the body; numba-compiled kernels left out (they take their arrays
    one by one)."""
    import ast

    found = []
    for folder in ("theory", "numerics", "empirical", "ropesplit"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(_parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                if any("numba" in ast.unparse(d) for d in node.decorator_list):
                    continue
                a = node.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                count = len(names) + (a.vararg is not None) + (a.kwarg is not None)
                count -= bool(names) and names[0] in ("self", "cls")
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                found.append((f"{path.relative_to(root)}:{node.lineno} {node.name}", count, lines))
    return found


def test_no_function_takes_more_than_8_parameters_or_runs_past_80_lines():
    over = [f"{where}: {n} parameters, {lines} lines" for where, n, lines in _functions(ROOT)
            if n > MAX_PARAMETERS or lines > MAX_LINES]  # fmt: skip
    assert not over, "\n".join(over)


def test_the_size_check_sees_a_long_function(tmp_path):
    """The check can fail: a planted function of 9 parameters, and one of 81 lines."""
    (tmp_path / "numerics").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    (tmp_path / "numerics" / "planted.py").write_text(
        "def wide(a, b, c, d, e, f, g, h, *, i):\n    return a\n\n\n"
        f"def long():\n{body}\n"
    )
    got = {where.split()[-1]: (n, lines) for where, n, lines in _functions(tmp_path)}
    assert got == {"wide": (9, 2), "long": (0, 81)}


# ------------------------------------------------------------------------ the wings of empirical

# empirical holds only wing folders (docs/architecture.md); each wing's ``__init__`` says in
# its docstring what it holds and, on a paragraph opening "May import:", the other wings it
# may import (itself always). The rules are read off the folders, never kept here.


def _wing_rules(empirical: Path) -> dict[str, set[str]]:
    """Each wing folder of ``empirical`` -> the wings it may import (itself included), read
    from the "May import:" paragraph of its ``__init__`` docstring."""
    import ast
    import re

    wings = sorted(p.name for p in empirical.iterdir()
                   if p.is_dir() and (p / "__init__.py").is_file())  # fmt: skip
    rules = {}
    for wing in wings:
        doc = ast.get_docstring(_parse((empirical / wing / "__init__.py").read_text())) or ""
        rule = [para for para in doc.split("\n\n") if para.startswith("May import:")]
        assert len(rule) == 1, f"empirical/{wing}/__init__.py states no 'May import:' paragraph"
        rules[wing] = {w for w in wings if re.search(rf"\b{w}\b", rule[0])} | {wing}
    return rules


def _wing_violations(empirical: Path) -> list[str]:
    """Every runtime import of one wing's module into a wing its rules do not allow."""
    rules = _wing_rules(empirical)
    bad = []
    for wing, allowed in rules.items():
        for path in sorted((empirical / wing).rglob("*.py")):
            for line, target in _runtime_imports(path):
                parts = target.split(".")
                if parts[:2] == ["ropesplit", "empirical"] and len(parts) > 2 and (
                        parts[2] in rules and parts[2] not in allowed):  # fmt: skip
                    bad.append(f"{path.relative_to(empirical.parent)}:{line} ({wing}) imports "
                               f"{target} ({parts[2]})")  # fmt: skip
    return bad


def test_empirical_holds_only_its_wing_folders():
    loose = sorted(p.name for p in (ROOT / "empirical").iterdir()
                   if p.name not in ("__init__.py", "__pycache__") and not p.is_dir())  # fmt: skip
    assert not loose, f"modules outside a wing folder: {loose}"
    assert set(_wing_rules(ROOT / "empirical")) == {
        "adapter", "model", "analysis", "experiments", "measurement", "training"}


def test_the_wings_of_empirical_import_only_what_their_place_allows():
    rules = _wing_rules(ROOT / "empirical")
    assert rules["adapter"] == {"adapter"}  # the seam with transformers stands on no wing
    assert rules["model"] == {"adapter", "model"}
    bad = _wing_violations(ROOT / "empirical")
    assert not bad, "\n".join(bad)


def test_the_wing_check_sees_a_planted_import(tmp_path):
    """The check can fail: a model-wing module that imports the analysis wing."""
    for wing, rule in (("model", "the adapter and itself"), ("analysis", "the model wing")):
        (tmp_path / wing).mkdir()
        doc = f'"""The {wing} wing.\n\nMay import: {rule}.\n"""\n'
        (tmp_path / wing / "__init__.py").write_text(doc)
    (tmp_path / "model" / "planted.py").write_text(
        "from ropesplit.empirical.analysis.analyze import analyze\n")
    (tmp_path / "analysis" / "fine.py").write_text(
        "from ropesplit.empirical.model.capture import capture\n")
    assert _wing_violations(tmp_path) == [
        f"{tmp_path.name}/model/planted.py:1 (model) imports "
        "ropesplit.empirical.analysis.analyze (analysis)"]


def _runtime_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of each absolute import that runs (those under ``if TYPE_CHECKING``
    left out), ``from package import submodule`` as the submodule."""
    import ast

    tree = _parse(path.read_text(encoding="utf-8"))
    guards = [node for node in ast.walk(tree)
              if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)]
    typing_only = {id(n) for guard in guards for n in ast.walk(guard)}
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((node.lineno, sub if _module_path(sub) else node.module))
    return found


def _module_path(module: str) -> Path | None:
    """The file of a ``ropesplit`` module (package-dir mapped), or None."""
    parts = module.split(".")
    if parts[0] != "ropesplit":
        return None
    folder = {"theory": "theory", "numerics": "numerics", "empirical": "empirical"}
    base = ROOT / folder[parts[1]] if len(parts) > 1 and parts[1] in folder else ROOT / "ropesplit"
    rest = parts[2:] if len(parts) > 1 and parts[1] in folder else parts[1:]
    for candidate in (base.joinpath(*rest).with_suffix(".py"), base.joinpath(*rest, "__init__.py")):
        if rest and candidate.is_file():
            return candidate
    return None


def _graph() -> dict[str, set[str]]:
    """Every ``ropesplit`` module -> the ``ropesplit`` modules it imports when it runs."""
    graph: dict[str, set[str]] = {}
    for folder, package in LAYER_FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            module = ".".join([package, *rel.parts]).removesuffix(".__init__")
            graph[module] = {t for _, t in _runtime_imports(path) if _module_path(t)}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module (Tarjan),
    a package and the submodules its ``__init__`` gathers aside (importing ``a.b`` runs
    ``a`` first: that is order, not a circle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w.startswith(v + "."):  # a package importing its own submodule
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_round_a_circle():
    assert _cycles(_graph()) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
