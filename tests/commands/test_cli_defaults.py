"""Each default is stated once, on the settings object; an error names the option given.

Every option whose ``dest`` is a field of the settings object its subcommand builds
(``ClaimsSettings``, ``RunSettings``, ``ExperimentSettings``, ``Placement``) defaults to None
in argparse: the settings hold the default, and ``commands.given`` passes on only the options
the command line gave. ``train`` reads its defaults off ``TrainConfig`` (equal by
construction). A settings check names its field, which is its option's name, so the CLI
names the option that gave the bad value (``--grid-tokens``, not ``--tokens``).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import pytest

from ropesplit.claims.records import ClaimsSettings
from ropesplit.cli import build_parser, main
from ropesplit.empirical.experiments.settings import ExperimentSettings
from ropesplit.empirical.model.loading import Placement
from ropesplit.report.context import RunSettings


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _defaults(*settings: Any) -> dict[str, Any]:
    """Field name -> default of each settings object (a later one's field wins)."""
    out: dict[str, Any] = {}
    for one in settings:
        out |= {f.name: getattr(one, f.name) for f in dataclasses.fields(one)}
    return out


def _settings() -> dict[str, dict[str, Any]]:
    """Each subcommand -> the fields of the settings it builds from its options, with their
    defaults (``figures``/``report``: ``--draws`` is their ``RunSettings.experiments``')."""
    from ropesplit.empirical.training.train import TrainConfig

    run = RunSettings()
    return {
        "derive": {}, "bound": {}, "merge": {}, "compare": {},
        "analyze": _defaults(Placement()),
        "claims": _defaults(ClaimsSettings(), Placement()),
        "perturb": _defaults(ExperimentSettings(), Placement()),
        "figures": _defaults(run.experiments, run),
        "report": _defaults(run.experiments, ClaimsSettings(), run),
        "train": _defaults(TrainConfig()),
    }  # fmt: skip


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.dest != "help"]


def test_every_subcommand_is_mapped_to_its_settings():
    assert set(_settings()) == set(_subparsers())


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_an_option_the_settings_default_has_no_default_of_its_own(command):
    """argparse's default of each option is None, or (``train`` only, whose defaults are read
    off ``TrainConfig``) equal to its settings field's."""
    fields = _settings()[command]
    matched, bad = [], []
    for action in _options(_subparsers()[command]):
        if action.dest not in fields or action.default is None:
            matched += [action.dest] if action.dest in fields else []
            continue
        matched.append(action.dest)
        if command != "train" or action.default != fields[action.dest]:
            bad.append(f"{action.option_strings[-1]} defaults to {action.default!r}, "
                       f"its settings field to {fields[action.dest]!r}")  # fmt: skip
    assert not bad, "\n".join(bad)
    assert bool(matched) == bool(fields), (command, matched)  # not vacuous


def test_an_empty_command_line_builds_the_settings_defaults():
    from ropesplit.commands.claims import claims_settings
    from ropesplit.commands.figures import settings_from

    parse = build_parser().parse_args
    assert claims_settings(parse(["claims"])) == ClaimsSettings()
    assert claims_settings(parse(["report"]), shard=False) == ClaimsSettings()
    assert settings_from(parse(["figures"])) == RunSettings()
    assert settings_from(parse(["report"])).experiments_run.draws == 2
    assert settings_from(parse(["figures", "--draws", "3", "--seed", "4"])).experiments_run == (
        ExperimentSettings(draws=3, seed=4))


@pytest.mark.parametrize("command", ["claims", "report"])
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--grid-tokens", "8,512"], "--grid-tokens must be at least 16, got 8"),
        (["--tokens", "8", "--grid-tokens", "256,512"], "--tokens must be at least 16, got 8"),
        (["--order-passages", "7"], "--order-passages must be at least 8, got 7"),
    ],
)
def test_an_error_names_the_option_given(command, flags, message, tmp_path, capsys):
    assert main([command, *flags, "--out" if command == "report" else "--seed",
                 str(tmp_path / "new") if command == "report" else "0"]) == 2  # fmt: skip
    assert capsys.readouterr().err == f"ropesplit {command}: error: {message}\n"


def test_figures_at_64_tokens_runs_without_a_figure_tokens_error(monkeypatch, tmp_path, capsys):
    """``--figure-tokens`` left out is derived from ``--tokens`` (96, or fewer tokens), never
    checked as if given; one given beyond ``--tokens`` names both options."""
    seen = []

    def run_figures(settings, out, **options):  # the pipeline itself: tests/report
        seen.append(settings)
        return []

    monkeypatch.setattr("ropesplit.report.pipeline.run_figures", run_figures)
    assert main(["figures", "--tokens", "64", "--out", str(tmp_path / "figs")]) == 0, (
        capsys.readouterr().err)
    (settings,) = seen
    assert (settings.tokens, settings.figure_tokens, settings.figure_length) == (64, None, 64)
    assert RunSettings().figure_length == 96
    assert main(["figures", "--tokens", "64", "--figure-tokens", "96"]) == 2
    assert capsys.readouterr().err.endswith(
        "error: --figure-tokens must lie in [2, --tokens = 64], got 96\n")


def test_one_minimum_of_tokens_for_every_command(capsys):
    for command in ("analyze", "bound", "claims", "perturb", "figures", "report"):
        assert main([command, "--tokens", "15"]) == 2
        assert capsys.readouterr().err == (
            f"ropesplit {command}: error: --tokens must be at least 16, got 15\n")
