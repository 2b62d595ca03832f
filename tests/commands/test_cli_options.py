"""Every option of every subcommand is checked where the options are parsed (issue 31).

The sweep reads the live parser: each integer, float and comma-separated option gets the
bad values of its kind, each single-valued option is given twice, and every pair of
options that set one destination is given together. Each must fail while parsing, as one
line ``ropesplit CMD: error: ...`` with exit code 2 and no traceback, before any work.
"""

from __future__ import annotations

import argparse

import pytest

from ropesplit.cli import REPEATABLE, IntAtLeast, ListOf, build_parser, main, positive_float


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _options(kind) -> list[tuple[str, str]]:
    return [(name, action.option_strings[-1]) for name, p in _subparsers().items()
            for action in p._actions if isinstance(action.type, kind)
            or action.type is kind]  # fmt: skip


def _float_options() -> list[tuple[str, str]]:
    return [(name, action.option_strings[-1]) for name, p in _subparsers().items()
            for action in p._actions if action.type is positive_float]  # fmt: skip


def _fails_in_one_line(capsys, command: str, *argv: str) -> str:
    code = main([command, *argv])
    out, err = capsys.readouterr()
    assert code == 2, (argv, err)
    assert err.startswith(f"ropesplit {command}: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and out == ""
    return err


def test_the_sweep_sees_every_kind_of_option():
    ints, floats, lists = _options(IntAtLeast), _float_options(), _options(ListOf)
    assert ("train", "--seq-len") in ints and ("analyze", "--tokens") in ints
    assert ("train", "--lr") in floats
    assert {("train", "--seeds"), ("train", "--bases"), ("claims", "--grid-tokens"),
            ("perturb", "--layers")} <= set(lists)  # fmt: skip


@pytest.mark.parametrize(("command", "option"), _options(IntAtLeast))
def test_bad_integers_are_one_line(capsys, command, option):
    minimum = next(a.type.minimum for a in _subparsers()[command]._actions
                   if option in a.option_strings)  # fmt: skip
    for value in ["x", "1.5", str(minimum - 1)]:
        err = _fails_in_one_line(capsys, command, f"{option}={value}")
        assert option in err


@pytest.mark.parametrize(("command", "option"), _float_options())
def test_bad_floats_are_one_line(capsys, command, option):
    for value in ["x", "nan", "inf", "-1", "0"]:
        _fails_in_one_line(capsys, command, f"{option}={value}")


@pytest.mark.parametrize(("command", "option"), _options(ListOf))
def test_bad_lists_are_one_line(capsys, command, option):
    for value in ["", "1,,2", "x", "-1", "2,2"]:
        err = _fails_in_one_line(capsys, command, f"{option}={value}")
        assert option in err


def _single_valued() -> list[tuple[str, str, str]]:
    out = []
    for name, p in _subparsers().items():
        for action in p._actions:
            if (not action.option_strings or isinstance(action, REPEATABLE)
                    or action.dest in ("help", "version")):  # fmt: skip
                continue
            value = "" if action.nargs == 0 else f"={_good(action)}"
            out.append((name, action.option_strings[-1], value))
    return out


def _good(action: argparse.Action) -> str:
    if action.choices:
        return str(next(iter(action.choices)))
    if isinstance(action.type, ListOf):
        return "1,2"
    return "1" if isinstance(action.type, IntAtLeast) or action.type is positive_float else "x"


@pytest.mark.parametrize(("command", "option", "value"), _single_valued())
def test_an_option_given_twice_is_refused(capsys, command, option, value):
    err = _fails_in_one_line(capsys, command, option + value, option + value)
    assert f"{option} is given twice" in err


def _same_destination() -> list[tuple[str, str, str]]:
    out = []
    for name, p in _subparsers().items():
        by_dest: dict[str, list[argparse.Action]] = {}
        for action in p._actions:
            if action.option_strings and action.dest not in ("help", "version"):
                by_dest.setdefault(action.dest, []).append(action)
        for actions in by_dest.values():
            for a, b in zip(actions, actions[1:], strict=False):
                out.append((name, a.option_strings[-1] + ("" if a.nargs == 0 else
                                                           f"={_good(a)}"),
                            b.option_strings[-1] + ("" if b.nargs == 0 else f"={_good(b)}")))
    return out


def test_two_options_for_one_thing_are_refused(capsys):
    pairs = _same_destination()
    assert ("analyze", "--control=random-init", "--no-control") in pairs
    for command, a, b in pairs:
        err = _fails_in_one_line(capsys, command, a, b)
        assert "set the same thing; give one" in err


def test_collecting_options_may_repeat():
    """``--model A --model B`` (one models x claims table) still parses."""
    parser = build_parser()
    args = parser.parse_args(["claims", "--model", "a", "--model", "b"])
    assert args.model == ["a", "b"]
