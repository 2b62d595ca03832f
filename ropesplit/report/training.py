r"""The report's ``train`` stage: a small Llama trained here (``ropesplit train``).

:func:`train_stage` trains :data:`REPORT_TRAIN` (the default model of
:mod:`ropesplit.empirical.training.train`, fewer steps than ``ropesplit train``) at the
RoPE bases :data:`REPORT_BASES` into ``REPORT/train/`` (a rerun resumes the
finished runs: the same numbers) and returns the ``ropesplit train --json``
record, written as ``train.json``; figures 11 and 12 are drawn from it by the
gather step. It also leaves on the context what the ``length`` and ``terms``
stages run on, in memory: :class:`TrainedSubject`, the last checkpoint of the
first base's run with that run's config, loaded once for both. Importing this
module imports torch; the pipeline imports it when the stage runs.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.training.train import TrainConfig

__all__ = ["REPORT_BASES", "REPORT_ENCODERS", "REPORT_RECALL", "REPORT_TRAIN", "RECALL_SEEDS",
           "TrainedSubject", "encoder_stage", "recall_stage", "train_stage"]

# the default model, fewer steps (about 1-2 min per base on 2 cores); tests set a tiny one
REPORT_TRAIN = TrainConfig(steps=150, checkpoints=6)
REPORT_BASES = (10000.0, 100.0)  # many vs no slow pairs at L_train = 128 (7 vs 0 of 16)
# associative recall at a report's size: ropesplit train --task recall's model on
# half the length (L_train 64, 21 pairs of 32 content tokens; base 10000 leaves 4 of 8 pairs
# slow, base 100 none, though its slowest pair turns only 1.1 rad over 64 tokens), 400 steps
# and 3 checkpoints, about 25 s a run on 2 cores, three seeds (the verdicts' unit) per base.
# At L_train 128 (the documented run: 95 s a run) the stage took 330 s of a 1011 s report.
REPORT_RECALL = TrainConfig(task="recall", steps=400, seq_len=64, vocab=32, d_model=64,
                            d_ff=256, batch=32, lr=3e-3, init_std=0.1,
                            checkpoints=3)  # fmt: skip
RECALL_SEEDS = 3
# attention both ways, trained here: the masked-LM objective (a EuroBERT of REPORT_TRAIN's
# shape) on the report's text and on the bundled proteins (24 sequences: L_train 64 leaves
# the held-out tail its 8 windows), at REPORT_BASES' first base, the run's seed; text=None
# stands for the bundled protein file (its path is the installed package's)
REPORT_ENCODERS = {"text": dataclasses.replace(REPORT_TRAIN, task="mlm"),
                   "proteins": dataclasses.replace(REPORT_TRAIN, task="mlm", seq_len=64)}


@dataclasses.dataclass
class TrainedSubject:
    """The model the ``length`` and ``terms`` stages run on: one finished training run."""

    cfg: Any  # that run's TrainConfig (its base, seed and folder)
    checkpoint: Path  # its last complete checkpoint
    _loaded: Any = dataclasses.field(default=None, repr=False)

    @property
    def subject(self) -> str:
        return (f"{self.checkpoint} (trained here: L_train {self.cfg.seq_len}, RoPE base "
                f"{self.cfg.rope_base:g})")  # fmt: skip

    def model(self) -> Any:
        """The checkpoint as a ``LoadedModel``, loaded on first use and kept."""
        if self._loaded is None:
            from ropesplit.empirical import load_model

            self._loaded = load_model(str(self.checkpoint))
        return self._loaded


def train_stage(ctx: Any) -> dict[str, Any]:
    """Train :data:`REPORT_TRAIN` at :data:`REPORT_BASES` under ``ctx.folder / "train"``;
    sets ``ctx.trained`` and returns the record."""
    import tempfile

    from ropesplit.empirical.training.emergence import run_emergence
    from ropesplit.empirical.training.train import checkpoints

    root = Path(ctx.folder or tempfile.mkdtemp(prefix="ropesplit-train-"))
    cfg = dataclasses.replace(REPORT_TRAIN, out=str(root / "train"), seed=ctx.settings.seed)
    record = run_emergence(cfg, list(REPORT_BASES), [ctx.settings.seed],
                           say=lambda line: print(line, file=sys.stderr))  # fmt: skip
    first = record["runs"][0]
    run_cfg = dataclasses.replace(cfg, rope_base=float(first["rope_base"]), seed=first["seed"],
                                  out=first["out"])  # fmt: skip
    found = checkpoints(run_cfg.out)
    if not found:
        raise RopesplitError(f"no complete checkpoint under {run_cfg.out}")
    ctx.trained = TrainedSubject(run_cfg, found[-1])
    return record


def encoder_stage(ctx: Any) -> dict[str, Any]:
    """Train :data:`REPORT_ENCODERS` under ``ctx.folder / "encoder"``: per corpus the
    ``ropesplit train --task mlm --json`` record, and the last checkpoint analysed on its
    first held-out window (``analyze``: every pair both ways, the three-term fit of arXiv
    2602.20449 beside the split)."""
    import tempfile

    from ropesplit.empirical import load_model
    from ropesplit.empirical.analysis.analyze import analyze
    from ropesplit.empirical.model.corpus import SWISSPROT
    from ropesplit.empirical.training.emergence import run_emergence
    from ropesplit.empirical.training.train import checkpoints
    from ropesplit.empirical.training.train_measure import held_out_ids

    root = Path(ctx.folder or tempfile.mkdtemp(prefix="ropesplit-encoder-")) / "encoder"
    root.mkdir(exist_ok=True)
    out: dict[str, Any] = {}
    for corpus, base_cfg in REPORT_ENCODERS.items():
        cfg = dataclasses.replace(base_cfg, out=str(root / corpus), seed=ctx.settings.seed,
                                  text=str(SWISSPROT) if corpus == "proteins" else None)
        record = run_emergence(cfg, [REPORT_BASES[0]], [ctx.settings.seed],
                               say=lambda line: print(line, file=sys.stderr))  # fmt: skip
        last = load_model(str(checkpoints(cfg.out)[-1]))
        final = analyze(last, held_out_ids(cfg)[0])
        record["final_analysis"] = {"summary": final.summary,
                                    "summary_three_term": final.summary_three_term,
                                    "masks": sorted({h["mask"] for h in final.heads})}
        out[corpus] = record
    return out


def recall_stage(ctx: Any) -> dict[str, Any]:
    """Train :data:`REPORT_RECALL` at :data:`REPORT_BASES` over :data:`RECALL_SEEDS` seeds
    (from the run's seed on) under ``ctx.folder / "recall"``; the ``ropesplit train --task
    recall --json`` record, with the predictions and their verdicts over seeds."""
    import tempfile

    from ropesplit.empirical.training.emergence import run_emergence

    root = Path(ctx.folder or tempfile.mkdtemp(prefix="ropesplit-recall-"))
    cfg = dataclasses.replace(REPORT_RECALL, out=str(root / "recall"))
    seeds = [ctx.settings.seed + i for i in range(RECALL_SEEDS)]
    return run_emergence(cfg, list(REPORT_BASES), seeds,
                         say=lambda line: print(line, file=sys.stderr))  # fmt: skip
