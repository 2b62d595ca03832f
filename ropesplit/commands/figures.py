"""``ropesplit figures``: the figures drawn from one model, as PDF and PNG.

Loads the model (default: the embedded SmolLM2-135M-Instruct) and its
random-init twin, analyses every head, runs the four experiments and draws
each figure at one-column (3.3 in) and two-column (6.9 in) width into
``--out``, as ``fig{n}-{name}-{single|double}.{pdf|png}``. The files are
byte-identical when re-run with the same flags. Exit code 2 on bad input.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ropesplit.commands import add_device_arguments, add_model_arguments, built
from ropesplit.commands._types import SEED, InputFile, OutputFolder

if TYPE_CHECKING:  # pragma: no cover
    from ropesplit.report.pipeline import RunSettings

HELP = "draw the figures of one model (PDF and PNG, 3.3 in and 6.9 in)"


def add_run_arguments(parser: argparse.ArgumentParser, *, out_default: str) -> None:
    """The flags ``figures`` and ``report`` share: model, text, sizes, seed, head, out."""
    add_model_arguments(parser)
    parser.add_argument("--text", metavar="FILE", type=InputFile,
                        help="UTF-8 text (default: Python's docs)")
    parser.add_argument("--tokens", type=int, default=512, help="tokens analysed (default 512)")
    parser.add_argument("--seed", type=SEED, default=0, help="control weights, sampling, draws")
    parser.add_argument("--draws", dest="draws", type=int, default=2,
                        help="perturbation draws per scheme and rate (default 2)")  # fmt: skip
    parser.add_argument("--head", metavar="LAYER.HEAD",
                        help="figure 1's head (default: the head with median r_split)")
    parser.add_argument("--figure-tokens", type=int, default=96,
                        help="tokens in figure 1's heatmaps (default 96)")  # fmt: skip
    add_device_arguments(parser)
    parser.add_argument("--out", metavar="DIR", type=OutputFolder, default=out_default,
                        help=f"output folder (default {out_default})")


def prepare_out(path: str, what: str) -> Path:
    """The output folder, created when only it is missing; a one-line error otherwise."""
    from ropesplit.core.io import output_folder

    return output_folder(path, what)


def settings_from(args: argparse.Namespace, **more: Any) -> RunSettings:
    """:class:`~ropesplit.report.pipeline.RunSettings` from the shared flags (and ``more``
    fields: the report's claims options), checked as it is built."""
    from ropesplit.empirical.experiments.settings import ExperimentSettings
    from ropesplit.report.figure_data import parse_head
    from ropesplit.report.pipeline import RunSettings

    experiments = built(ExperimentSettings, draws=args.draws, seed=args.seed)
    return built(RunSettings,
        model=args.model, gguf_file=args.gguf_file, text=args.text, tokens=args.tokens,
        seed=args.seed, experiments=experiments, figure_tokens=args.figure_tokens,
        head=parse_head(args.head) if args.head else None, device=args.device, dtype=args.dtype,
        **more,
    )  # fmt: skip


def run_pipeline(args: argparse.Namespace, what: str, run: Any, **options: Any) -> Any:
    """Check the flags, then the output folder, then ``run(settings, out, **options)``."""
    settings = settings_from(args)  # bad flags fail before anything is created
    out = prepare_out(args.out, what)
    return run(settings, out, **options)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, out_default="figures")
    parser.add_argument("--width", choices=["single", "double", "all"], default="all",
                        help="3.3 in (single), 6.9 in (double) or both (default)")  # fmt: skip
    parser.add_argument("--format", choices=["pdf", "png", "all"], default="all",
                        help="vector PDF, PNG or both (default)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Load, analyse, run the experiments and write every figure into ``--out``."""
    widths = ("single", "double") if args.width == "all" else (args.width,)
    formats = ("pdf", "png") if args.format == "all" else (args.format,)
    from ropesplit.report.pipeline import run_figures

    written = run_pipeline(args, "figures", run_figures, widths=widths, formats=formats)
    out = args.out
    print(f"{len(written)} files written to {out}")
    return 0
