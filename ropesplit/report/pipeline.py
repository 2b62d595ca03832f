r"""The report run: every step of the toolkit on one model and one text, through the Python APIs.

Stages, one progress line each on stderr (with tqdm bars inside the long ones):

1. ``derive``   the sympy checks of THEORY.md (``ropesplit derive --check``);
2. ``bound``    the numerics table on synthetic Q/K (``ropesplit bound --pattern all``);
3. ``load``     the model, once, and its random-init twin (the control);
4. ``analyze``  THEORY.md section 5 statistics on every head, trained and control;
5. ``perturb``  the four experiments of THEORY.md section 4;
6. ``figures``  the eight figures, PDF and PNG, one and two columns;
7. ``render``   ``index.html`` (self-contained) and ``report.md``.

Each step's JSON is written beside the report (``derive.json``,
``bound.json``, ``analyze.json``, ``perturb.json``) in the schema of its own
command, and the report reads every number from those records. The header
records package versions, model, text and token hashes, token count, seed and
the run time of each stage.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import platform
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ropesplit.errors import RopesplitError

__all__ = ["RunSettings", "collect_figure_data", "run_figures", "run_report"]

_VERSIONED = ("ropesplit", "numpy", "torch", "transformers", "sympy", "matplotlib", "gguf")


@dataclass
class RunSettings:
    """What one run reads and how much it computes (defaults sized for 2 CPU cores)."""

    # Hugging Face id or folder; None: the embedded SmolLM2-135M; or a causal LM
    # object in memory (transformers PreTrainedModel) with its ``tokenizer``
    model: Any = None
    tokenizer: Any = None  # only with a model object
    gguf_file: str | None = None  # a GGUF file inside ``model``'s folder
    text: str | None = None  # a UTF-8 file; None: Python's language reference
    tokens: int = 512  # tokens analysed and perturbed
    seed: int = 0  # control weights, pair sampling, perturbations
    seeds: int = 2  # perturbation seeds per (scheme, rate)
    head: tuple[int, int] | None = None  # figure 1's (layer, head); None: median r_split
    figure_tokens: int = 96  # tokens of figure 1's heatmaps and figure 4's heads
    control: bool = True  # also analyse the random-init twin
    bound_tokens: int = 512  # tokens of the synthetic heads in the numerics table


@dataclass
class _Stages:
    """One line per stage on stderr, with its duration; durations kept for the header."""

    total: int
    seconds: dict[str, float] = field(default_factory=dict)
    stream: Any = None

    @contextlib.contextmanager
    def stage(self, name: str, what: str) -> Iterator[None]:
        out = self.stream or sys.stderr
        index = len(self.seconds) + 1
        print(f"[{index}/{self.total}] {name}: {what} ...", file=out, flush=True)
        start = time.perf_counter()
        yield
        self.seconds[name] = round(time.perf_counter() - start, 1)
        print(f"[{index}/{self.total}] {name}: done in {self.seconds[name]:.1f} s", file=out,
              flush=True)  # fmt: skip


def _command_json(command: str, argv: Sequence[str], path: Path) -> dict[str, Any]:
    """Run subcommand ``command``'s own ``run`` (in process) with ``--json path``; read it back.

    The command's table goes to a buffer, not the terminal; its exit code
    (1 for a failed check) is recorded in the JSON the report reads.
    """
    import importlib

    module = importlib.import_module(f"ropesplit.commands.{command}")
    parser = argparse.ArgumentParser(prog=f"ropesplit {command}")
    module.add_arguments(parser)
    args = parser.parse_args([*argv, "--json", str(path)])
    with contextlib.redirect_stdout(io.StringIO()):
        exit_code = int(module.run(args))
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    record.setdefault("exit_code", exit_code)
    return record


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def _load(settings: RunSettings) -> tuple[Any, Any | None, Any, str]:
    """The model, its random-init twin (or None), the token ids ``(N,)`` and the text."""
    from ropesplit.empirical.analyze import check_memory
    from ropesplit.empirical.models import load_model, random_init_twin
    from ropesplit.empirical.text import default_text, read_text, tokenize

    text = read_text(settings.text) if settings.text else default_text()
    loaded = load_model(settings.model, settings.gguf_file, tokenizer=settings.tokenizer,
                        seed=settings.seed)  # fmt: skip
    ids = tokenize(loaded, text, settings.tokens)  # (N,); refuses more than the context
    check_memory(loaded, settings.tokens)
    control = random_init_twin(loaded, settings.seed) if settings.control else None
    return loaded, control, ids, text


def _analyze(loaded: Any, control: Any | None, ids: Any, seed: int) -> dict[str, Any]:
    """The ``ropesplit analyze --json`` record: trained heads, summary, and the control."""
    from tqdm import tqdm

    from ropesplit.empirical.analyze import analysis_record, analyze

    models = [loaded] + ([control] if control is not None else [])
    with tqdm(total=sum(m.n_layers for m in models), desc="layers", unit="layer",
              file=sys.stderr, disable=None, leave=False) as bar:  # fmt: skip
        runs = [analyze(m, ids, seed=seed, on_layer=bar.update) for m in models]
    return analysis_record(runs[0], runs[1] if control is not None else None, seed)


def _perturb(loaded: Any, ids: Any, settings: RunSettings) -> dict[str, Any]:
    """The ``ropesplit perturb --experiment all --json`` record."""
    from tqdm import tqdm

    from ropesplit.empirical.experiments import EXPERIMENTS, forward_count, run_experiments

    with tqdm(total=forward_count(EXPERIMENTS, settings.seeds), desc="forward passes",
              unit="input", file=sys.stderr, disable=None, leave=False) as bar:  # fmt: skip
        return run_experiments(loaded, ids, seeds=settings.seeds, seed=settings.seed,
                               on_forward=bar.update)  # fmt: skip


def collect_figure_data(
    loaded: Any,
    control: Any | None,
    ids: Any,
    analysis: Mapping[str, Any],
    perturb: Mapping[str, Any] | None,
    settings: RunSettings,
) -> dict[str, dict[str, Any]]:
    """Every figure's keyword arguments, from the run's records and fresh captures.

    Figure 1 and the real heads of figure 4 use the first ``figure_tokens``
    tokens (readable heatmaps); figure 3 the full text, trained and control.
    """
    from ropesplit.empirical.capture import capture
    from ropesplit.figures import gather

    head = settings.head or gather.median_head(analysis["heads"])
    cache = capture(loaded, ids, keep_probs=False)
    control_cache = capture(control, ids, keep_probs=False) if control is not None else None
    short = capture(loaded, ids[: settings.figure_tokens], keep_probs=False)
    ordered = sorted(analysis["heads"], key=lambda r: float(r["r_split"]))
    lowest, highest = ordered[0], ordered[-1]
    real = [(int(lowest["layer"]), int(lowest["head"])), head,
            (int(highest["layer"]), int(highest["head"]))]  # fmt: skip
    data = {
        "decomposition": gather.decomposition_data(short, *head, model=analysis["model"]),
        "r_split": gather.r_split_data(analysis),
        "pair_energy": gather.pair_energy_data(cache, control_cache),
        "bound": gather.bound_data(short, list(dict.fromkeys(real)), seed=settings.seed),
        "sweep": gather.sweep_data(seed=settings.seed),
    }
    if perturb is not None:
        data["perturbation"] = gather.perturbation_data(perturb)
        data["distance"] = gather.distance_data(perturb)
        data["length"] = gather.length_data(perturb)
    return data


def _text_header(settings: RunSettings, loaded: Any, ids: Any, text: str) -> dict[str, Any]:
    import numpy as np

    token_ids = [int(t) for t in ids]
    return {
        "model": loaded.name,
        "text": settings.text or "Python language reference (pydoc_data.topics)",
        "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "token_ids_sha256": hashlib.sha256(
            np.asarray(token_ids, dtype=np.int64).tobytes()
        ).hexdigest(),  # the same digest as the perturb header's
        "tokens": len(token_ids),
        "seed": settings.seed,
        "perturbation_seeds": settings.seeds,
    }


def run_figures(
    settings: RunSettings,
    out: str | Path,
    *,
    widths: Sequence[str] = ("single", "double"),
    formats: Sequence[str] = ("pdf", "png"),
) -> list[Path]:
    """``ropesplit figures``: load, analyse, run the experiments, draw and write every figure."""
    from ropesplit.figures import write_figures

    folder = Path(out)
    stages = _Stages(total=5)
    with stages.stage("load", "model and random-init control"):
        loaded, control, ids, _ = _load(settings)
    with stages.stage("analyze", f"{loaded.n_layers} layers, trained and control"):
        analysis = _analyze(loaded, control, ids, settings.seed)
    with stages.stage("perturb", "the four experiments"):
        perturb = _perturb(loaded, ids, settings)
    with stages.stage("gather", "figure data"):
        data = collect_figure_data(loaded, control, ids, analysis, perturb, settings)
    with stages.stage("figures", f"8 figures to {folder}"):
        return write_figures(data, folder, widths=widths, formats=formats)


def run_report(settings: RunSettings, out: str | Path) -> Path:
    """``ropesplit report``: every stage, the JSON of each, the figures, HTML and Markdown.

    Writes into ``out`` (which must exist): ``derive.json``, ``bound.json``,
    ``analyze.json``, ``perturb.json``, ``figures/`` (PDF and PNG of every
    figure at both widths), ``index.html`` and ``report.md``. Returns the
    path of ``index.html``.
    """
    from ropesplit.figures import FIGURES, figure_files, write_figures
    from ropesplit.io import write_json, write_text
    from ropesplit.report.document import FigureBlock, build_document
    from ropesplit.report.render import render_html, render_markdown

    folder = Path(out)
    if not folder.is_dir():
        raise RopesplitError(f"cannot write the report to {folder}: folder does not exist")
    figures_dir = folder / "figures"
    figures_dir.mkdir(exist_ok=True)
    start = time.perf_counter()
    stages = _Stages(total=8)
    records: dict[str, dict[str, Any]] = {}
    with stages.stage("derive", "sympy checks of every step"):
        records["derive"] = _command_json("derive", ["--check"], folder / "derive.json")
    with stages.stage("bound", "numerics on synthetic queries and keys"):
        records["bound"] = _command_json(
            "bound",
            ["--pattern", "all", "--seed", str(settings.seed),
             "--tokens", str(settings.bound_tokens)],  # fmt: skip
            folder / "bound.json",
        )
    with stages.stage("load", "model and random-init control"):
        loaded, control, ids, text = _load(settings)
    with stages.stage("analyze", f"{loaded.n_layers} layers x {len(ids)} tokens, trained "
                      "and control"):  # fmt: skip
        records["analyze"] = _analyze(loaded, control, ids, settings.seed)
        write_json(folder / "analyze.json", records["analyze"])
    with stages.stage("perturb", "controlled distance, word order, position ids, length"):
        records["perturb"] = _perturb(loaded, ids, settings)
        write_json(folder / "perturb.json", records["perturb"])
    with stages.stage("gather", "figure data from captures and synthetic heads"):
        data = collect_figure_data(loaded, control, ids, records["analyze"], records["perturb"],
                                   settings)  # fmt: skip
    with stages.stage("figures", "8 figures, PDF and PNG, 3.3 in and 6.9 in"):
        write_figures(data, figures_dir)
    with stages.stage("render", "index.html and report.md"):
        blocks = [
            FigureBlock(spec.number, spec.title, spec.caption,
                        (figures_dir / figure_files(spec, "double", "png")).read_bytes(),
                        [f"figures/{figure_files(spec, w, f)}" for w in ("single", "double")
                         for f in ("pdf", "png")])
            for spec in FIGURES
        ]  # fmt: skip
        header = _text_header(settings, loaded, ids, text)
        header["stage_seconds"] = ", ".join(f"{k} {v:.1f}" for k, v in stages.seconds.items())
        header["run_seconds"] = round(time.perf_counter() - start, 1)
        header["versions"] = _versions()
        doc = build_document(header, records, blocks, _predictions())
        write_text(folder / "index.html", render_html(doc))
        links = {b.number: f"figures/{figure_files(s, 'double', 'png')}"
                 for b, s in zip(blocks, FIGURES, strict=True)}  # fmt: skip
        write_text(folder / "report.md", render_markdown(doc, links))
    return folder / "index.html"


def _predictions() -> dict[str, str]:
    """THEORY.md section 4's prediction for each experiment, as the experiments state it."""
    from ropesplit.empirical.experiments import PREDICTIONS

    return dict(PREDICTIONS)
