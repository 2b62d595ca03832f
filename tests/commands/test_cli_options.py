"""Every option of every subcommand is checked where the options are parsed.

The sweep reads the live parser: each integer, float and comma-separated option gets the
bad values of its kind, each single-valued option is given twice, and every pair of
options that set one destination is given together; each path option (by its metavar, and
the local models and corpora) gets a path of each bad kind: a file where a folder goes, a
folder where a file goes, a place that takes no files, a missing or unreadable input. Each
must fail while parsing, as one line ``ropesplit CMD: error: ...`` with exit code 2 and no
traceback, before any work, leaving every file as it was.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest

from ropesplit.cli import REPEATABLE, build_parser, main, path_kind
from ropesplit.commands import check_models
from ropesplit.commands._types import IntAtLeast, ListOf, positive_float


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
                   if option in a.option_strings and isinstance(a.type, IntAtLeast))  # fmt: skip
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


# ---------------------------------------------------------------------------------------- paths
# Every path an option names is checked once the command line is parsed, before `run`: by its
# type (cli.PATHS, commands._types.PathKind: OutputPath a file written, OutputFolder a folder
# written, InputFile a UTF-8 file read, InputRecord a JSON file read), and the corpora and
# local models by the checks their argument helpers register. `run` is replaced here by a
# stub, so a check that came late (or not at all) shows as a run that happened; nothing under
# the working folder may change.

BAD = {  # kind -> (what is wrong, the value, relative to the working folder)
    "PATH": [("a folder", "adir"), ("under a file", "afile/x.out"),
             ("a missing folder", "missing/x.out"), ("a folder taking no files", "/proc/x.out")],
    "DIR": [("a file", "afile"), ("under a file", "afile/sub"), ("a missing parent", "missing/sub"),
            ("a folder taking no files", "/proc/sub")],
    "FILE": [("missing", "missing.txt"), ("a folder", "adir"), ("not UTF-8", "latin.txt")],
    ".json": [("missing", "missing.json"), ("a folder", "adir"), ("not UTF-8", "latin.txt"),
              ("not JSON", "broken.json")],
    "CORPUS": [("missing", "missing-corpus"), ("not UTF-8", "latin.txt"),
               ("a folder without .txt", "empty"), ("JSON lines without a text", "broken.jsonl")],
}  # fmt: skip
BAD_MODEL = [("missing", ["--model", "./missing-model"], "./missing-model"),
             ("a file", ["--model", "afile"], "afile"),
             ("a folder without config.json", ["--model", "adir"], "adir"),
             ("a config.json that is not JSON", ["--model", "badmodel"], "badmodel"),
             ("a GGUF file not in the folder", ["--model", "adir", "--gguf-file", "x.gguf"],
              "x.gguf")]  # fmt: skip
GOOD = {"PATH": "new-{i}.out", "DIR": "newdir-{i}", "FILE": "text.txt", ".json": "good.json",
        "CORPUS": "corpus"}  # fmt: skip


def _name(action: argparse.Action) -> str:
    return action.option_strings[-1] if action.option_strings else str(action.metavar)


def _kind(action: argparse.Action) -> str | None:
    return "CORPUS" if action.metavar == "CORPUS" else path_kind(action)


def _path_options() -> list[tuple[str, str, str]]:
    """(command, option or positional, kind) of every path option of the live parser."""
    return [(name, _name(a), kind) for name, p in _subparsers().items() for a in p._actions
            if (kind := _kind(a))]  # fmt: skip


def _model_commands() -> list[str]:
    return [name for name, p in _subparsers().items() if "--model" in p._option_string_actions]


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working folder with one of each bad thing; every command's `run` a stub that says it
    was called."""
    (tmp_path / "afile").write_bytes(b"keep\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir" / "inside.txt").write_text("inside\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "latin.txt").write_bytes(b"caf\xe9 \xff\n")
    (tmp_path / "broken.json").write_text("{\n")
    (tmp_path / "broken.jsonl").write_text('{"text": 1}\n')
    (tmp_path / "badmodel").mkdir()
    (tmp_path / "badmodel" / "config.json").write_text("{\n")
    (tmp_path / "text.txt").write_text("some text\n")
    (tmp_path / "good.json").write_text("{}\n")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("a passage\n")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}\n")
    for i in range(3):
        (tmp_path / f"keep-{i}.out").write_bytes(f"keep {i}\n".encode())
    monkeypatch.chdir(tmp_path)
    ran: list[str] = []

    def stub(args: argparse.Namespace) -> int:
        ran.append(args.command)
        return 0

    for name in _subparsers():
        monkeypatch.setattr(importlib.import_module(f"ropesplit.commands.{name}"), "run", stub)
    return tmp_path, ran


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}  # fmt: skip


def _argv(command: str, swept: str, given: list[str]) -> list[str]:
    """``given`` (the swept option and its value); every other output an existing file or
    folder (they must stay as they are) and every positional a good value."""
    argv = list(given)
    for action in _subparsers()[command]._actions:
        name, kind = _name(action), _kind(action)
        if name == swept:
            continue
        if kind == "PATH":
            argv += [name, f"keep-{sum(a.startswith('keep-') for a in argv)}.out"]
        elif kind == "DIR":
            argv += [name, "adir"]
        elif kind and not action.option_strings:
            argv.append(GOOD[kind])
    return argv


def _fails_before_run(place, capsys, command: str, argv: list[str], bad: str,
                      why: str = "") -> str:  # fmt: skip
    """One line naming ``bad``, exit code 2, no run, and every file as it was."""
    root, ran = place
    before = _snapshot(root)
    err = _fails_in_one_line(capsys, command, *argv)
    assert err.strip() and "error:" in err and bad in err, (why, argv, err)
    assert ran == [], f"{command} ran with {why} {argv}: the path was not checked first"
    assert _snapshot(root) == before, f"{command} {argv} changed the working folder"
    return err


def test_the_sweep_sees_every_path_option():
    """Each option that names a file or folder has a kind; a new one without a path type
    (OutputPath, OutputFolder, InputFile, InputRecord; or the CORPUS metavar) fails here."""
    options = set(_path_options())
    assert {("analyze", "--json", "PATH"), ("analyze", "--csv", "PATH"),
            ("derive", "--out", "PATH"), ("figures", "--out", "DIR"), ("report", "--out", "DIR"),
            ("train", "--out", "DIR"), ("train", "--figures", "DIR"),
            ("report", "--claims-record", ".json"), ("compare", "CLAIMS.json", ".json"),
            ("merge", "SHARD.json", ".json"), ("claims", "--corpus", "CORPUS"),
            ("report", "--second-corpus", "CORPUS")} <= options  # fmt: skip
    for command in ("analyze", "figures", "perturb", "report", "train"):
        assert (command, "--text", "FILE") in options
    for name, p in _subparsers().items():
        for action in p._actions:
            if action.dest in ("json", "csv", "out", "text", "figures", "records", "corpus",
                               "second_corpus", "claims_record"):  # fmt: skip
                assert _kind(action), f"{name} {_name(action)} names a path but has no kind"
    assert set(_model_commands()) == {"analyze", "claims", "figures", "perturb", "report"}
    for name in _model_commands():
        assert check_models in _subparsers()[name].get_default("_checks")


@pytest.mark.parametrize(("command", "option", "kind"), _path_options())
def test_a_bad_path_is_one_line_before_any_work(place, capsys, command, option, kind):
    for why, value in BAD[kind]:
        given = [option, value] if option.startswith("-") else [value]
        _fails_before_run(place, capsys, command, _argv(command, option, given), value, why)


@pytest.mark.parametrize("command", _model_commands())
def test_a_bad_local_model_is_one_line_before_any_work(place, capsys, command):
    for why, values, shown in BAD_MODEL:
        _fails_before_run(place, capsys, command, _argv(command, "--model", values), shown, why)


@pytest.mark.parametrize("command", sorted({c for c, _, _ in _path_options()}))
def test_good_paths_reach_run_and_the_checks_write_nothing(place, capsys, command):
    """The same options with good values parse, and the checks leave no file behind."""
    root, ran = place
    before = _snapshot(root)
    argv: list[str] = []
    for i, (name, option, kind) in enumerate(_path_options()):
        if name == command:
            value = GOOD[kind].format(i=i)
            argv += [value] if not option.startswith("-") else [option, value]
    if command in _model_commands():
        argv += ["--model", "model"]
    assert main([command, *argv]) == 0, capsys.readouterr().err
    assert ran == [command] and _snapshot(root) == before


@pytest.mark.parametrize("command", [c for c in _subparsers()
                                     if sum(k == "PATH" for n, _, k in _path_options()
                                            if n == c) > 1])  # fmt: skip
def test_two_outputs_naming_one_file_are_refused(place, capsys, command):
    options = [o for n, o, k in _path_options() if n == command and k == "PATH"]
    argv = [part for option in options for part in (option, "keep-0.out")]
    err = _fails_before_run(place, capsys, command, argv, "keep-0.out")
    assert f"{options[0]} and {options[1]} both write keep-0.out" in err


def test_an_output_file_and_dev_null_still_work(place, capsys):
    """The checks refuse no ordinary output: /dev/null, twice, and a file that exists."""
    root, ran = place
    assert main(["derive", "--out", "/dev/null", "--json", "/dev/null"]) == 0
    assert main(["derive", "--out", "keep-0.out", "--json", "sub.json"]) == 0
    assert ran == ["derive", "derive"]
