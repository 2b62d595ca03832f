"""What the report's stages share: the run's settings, its context and the Stage record
(:mod:`ropesplit.report.stages` holds the stages, :mod:`ropesplit.report.pipeline` runs
them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ropesplit.claims.records import ClaimsSettings, check_tokens
from ropesplit.core.errors import SettingError
from ropesplit.empirical.experiments.settings import ExperimentSettings  # plain data, no torch

__all__ = ["DRAWS", "FIGURE_TOKENS", "RunContext", "RunSettings", "Stage"]

FIGURE_TOKENS = 96  # figure 1's heatmaps and figure 4's heads, when the run has as many tokens
DRAWS = 2  # the experiments' draws per (scheme, rate) when none are given (2 CPU cores)


@dataclass(frozen=True)
class RunSettings:
    """What one run reads and how much it computes (defaults sized for 2 CPU cores), checked
    when built. The claims' options are one :class:`~ropesplit.claims.records.ClaimsSettings`
    (``claims``), the same object ``ropesplit claims`` runs, and the experiments' one
    ``ExperimentSettings`` (``experiments``), the same ``ropesplit perturb`` runs; the run
    reads them with its own ``tokens`` and ``seed`` (:attr:`claims_run`,
    :attr:`experiments_run`). A field given to ``ropesplit figures``/``report`` is the option
    of its name (``figure_tokens``: ``--figure-tokens``) and holds its default; a failed check
    is a :class:`~ropesplit.core.errors.SettingError` naming the field. Frozen: what derives
    from the fields (:attr:`figure_length`, :attr:`claims_run`, :attr:`experiments_run`) is a
    property, never written back."""

    # Hugging Face id or folder; None: the embedded SmolLM2-135M; or a causal LM
    # object in memory (transformers PreTrainedModel) with its ``tokenizer``
    model: Any = None
    tokenizer: Any = None  # only with a model object
    gguf_file: str | None = None  # a GGUF file inside ``model``'s folder
    text: str | None = None  # a UTF-8 file; None: Python's language reference
    tokens: int = 512  # tokens analysed and perturbed
    seed: int = 0  # control weights, pair sampling, perturbations
    head: tuple[int, int] | None = None  # figure 1's (layer, head); None: median r_split
    # tokens of figure 1's heatmaps and figure 4's heads (None: FIGURE_TOKENS, or tokens when
    # fewer: figure_length)
    figure_tokens: int | None = None
    control: bool = True  # also analyse the random-init twin
    bound_tokens: int = 512  # tokens of the synthetic heads in the numerics table
    # the claims run: corpora, grid, passage counts (its tokens and seed: the run's)
    claims: ClaimsSettings = field(default_factory=ClaimsSettings)
    # the experiments' draws per (scheme, rate), fitted layers, batch (its seed: the run's)
    experiments: ExperimentSettings = field(
        default_factory=lambda: ExperimentSettings(draws=DRAWS))
    claims_records: tuple[str, ...] = ()  # other models' claims.json: the models x claims table
    intervention_tokens: int = 128  # tokens per passage of the interventions
    device: str | None = None  # torch device of a model read from disk (None: cpu)
    dtype: str | None = None  # its dtype (None: float32); the statistics are float64 anyway
    attention: str | None = None  # the attention kernel it runs (None: eager; Placement)
    # given token ids in place of the corpora (a model without a tokenizer): the claims'
    # (``claims_run.run_claims``' passage_ids) and the interventions' passages
    claims_ids: Any = None
    intervention_ids: Any = None

    def __post_init__(self) -> None:
        check_tokens(self.tokens)
        given = self.figure_tokens  # None: figure_length, which fits any tokens
        if given is not None and not 2 <= given <= self.tokens:
            raise SettingError("figure_tokens", f"must lie in [2, {{}} = {self.tokens}], "
                               f"got {given}", mentions=("tokens",))  # fmt: skip

    @property
    def figure_length(self) -> int:
        """The tokens of figure 1's heatmaps and figure 4's heads: ``figure_tokens``, or
        :data:`FIGURE_TOKENS` (the run's ``tokens`` when fewer)."""
        return min(FIGURE_TOKENS, self.tokens) if self.figure_tokens is None else self.figure_tokens

    @property
    def claims_run(self) -> ClaimsSettings:
        """The claims run's settings: ``claims`` at the run's ``tokens`` and ``seed``."""
        if (self.claims.tokens, self.claims.seed) == (self.tokens, self.seed):
            return self.claims
        return replace(self.claims, tokens=self.tokens, seed=self.seed)

    @property
    def experiments_run(self) -> ExperimentSettings:
        """The experiments' settings: ``experiments`` with the run's ``seed``."""
        return replace(self.experiments, seed=self.seed)


@dataclass
class RunContext:
    """What the stages share: settings, output folder, records so far, the model and its data."""

    settings: RunSettings
    folder: Path | None = None  # the report's folder (None: figures only)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # stage name -> JSON
    loaded: Any = None  # LoadedModel
    control: Any = None  # its random-init twin, or None
    ids: Any = None  # (N,) token ids
    text: str = ""
    trained: Any = None  # the train stage's TrainedSubject (report.training), in memory
    planned: tuple[str, ...] = ()  # the records this run's stages make, in order
    # written by the gather stage only: each figure's keyword arguments, and why any is not
    figure_data: dict[str, dict[str, Any]] = field(default_factory=dict)
    figure_missing: dict[str, str] = field(default_factory=dict)
    figure_folder: Path | None = None
    widths: Sequence[str] = ("single", "double")
    formats: Sequence[str] = ("pdf", "png")
    written: list[Path] = field(default_factory=list)  # figure files


@dataclass(frozen=True)
class Stage:
    """A step of the run: ``run(ctx)`` returns its JSON record (written as RECORD.json) or None.

    ``needs``: the records that must have been made before it (or for ``load`` the model in
    memory). ``makes``: the record it writes, when not the one of its name (two stages that
    make one kind of record on different subjects). ``gathers``: the gather step, which must
    run after every stage any figure needs (``FigureSpec.needs``) that this run has.
    """

    name: str
    what: str  # the progress line
    run: Callable[[RunContext], dict[str, Any] | None]
    needs: tuple[str, ...] = ()
    gathers: bool = False
    makes: str = ""

    @property
    def record(self) -> str:
        """The name of the record it makes (its file, ``RECORD.json``): ``makes`` or its name."""
        return self.makes or self.name
