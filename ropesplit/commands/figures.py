"""``ropesplit figures``: the figures drawn from one model, as PDF and PNG.

Loads the model (default: the embedded SmolLM2-135M-Instruct) and its
random-init twin, analyses every head, runs the four experiments and draws
each figure at one-column (3.3 in) and two-column (6.9 in) width into
``--out``, as ``fig{n}-{name}-{single|double}.{pdf|png}``. The files are
byte-identical when re-run with the same flags. Exit code 2 on bad input.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ropesplit.commands import add_device_arguments, add_model_arguments, built, given
from ropesplit.commands._types import SEED, InputFile, OutputFolder
from ropesplit.report.context import DRAWS, FIGURE_TOKENS, RunSettings

if TYPE_CHECKING:  # pragma: no cover
    from ropesplit.empirical.experiments.settings import ExperimentSettings

HELP = "draw the figures of one model (PDF and PNG, 3.3 in and 6.9 in)"


def add_run_arguments(parser: argparse.ArgumentParser, *, out_default: str) -> None:
    """The flags ``figures`` and ``report`` share: model, text, sizes, seed, head, out; each
    :class:`~ropesplit.report.context.RunSettings`' field of its name, defaulted there."""
    add_model_arguments(parser)
    parser.add_argument("--text", metavar="FILE", type=InputFile,
                        help="UTF-8 text (default: Python's docs)")
    parser.add_argument("--tokens", type=int,
                        help=f"tokens analysed (default {RunSettings.tokens})")
    parser.add_argument("--seed", type=SEED, help="control weights, sampling, draws "
                        f"(default {RunSettings.seed})")  # fmt: skip
    parser.add_argument("--draws", type=int, help="perturbation draws per scheme and rate "
                        f"(default {DRAWS})")  # fmt: skip
    parser.add_argument("--head", metavar="LAYER.HEAD",
                        help="figure 1's head (default: the head with median r_split)")
    parser.add_argument("--figure-tokens", type=int, help="tokens in figure 1's heatmaps "
                        f"(default {FIGURE_TOKENS}, or --tokens when fewer)")  # fmt: skip
    add_device_arguments(parser)
    parser.add_argument("--out", metavar="DIR", type=OutputFolder, default=out_default,
                        help=f"output folder (default {out_default})")


def settings_from(args: argparse.Namespace, **more: Any) -> RunSettings:
    """:class:`~ropesplit.report.context.RunSettings` from the shared flags given (and ``more``
    fields: the report's claims options), the rest at its defaults, checked as it is built
    (an error names the option given)."""
    from ropesplit.report.figure_data import parse_head

    fields = given(args, "model", "gguf_file", "text", "tokens", "seed", "figure_tokens",
                   "device", "dtype", "attention")  # fmt: skip
    if args.head:
        fields["head"] = parse_head(args.head)
    if args.draws is not None:
        fields["experiments"] = _experiments(args.draws)
    return built(RunSettings, **fields, **more)


def _experiments(draws: int) -> ExperimentSettings:
    """``--draws`` as the run's :class:`ExperimentSettings` (its seed: the run's)."""
    from ropesplit.empirical.experiments.settings import ExperimentSettings

    return built(ExperimentSettings, draws=draws)


def run_pipeline(args: argparse.Namespace, what: str, run: Any, **options: Any) -> Any:
    """Check the flags, then the output folder, then ``run(settings, out, **options)``."""
    settings = settings_from(args)  # bad flags fail before anything is created
    from ropesplit.core.io import output_folder

    out = output_folder(args.out, what)
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
