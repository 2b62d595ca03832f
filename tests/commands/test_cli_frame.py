"""The CLI frame and file output shared by every subcommand."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from ropesplit import RopesplitError
from ropesplit.cli import build_parser, main
from ropesplit.commands import ORDER
from ropesplit.core.io import output_path, write_json


def test_every_listed_subcommand_is_registered_in_order():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    names = list(sub.choices or ())
    present = [n for n in ORDER if n in names]
    assert names[: len(present)] == present
    assert "derive" in names


def test_missing_folder_is_a_one_line_error():
    with pytest.raises(RopesplitError, match=r"^cannot write .*: folder /nonexistent/dir does not"):
        output_path("/nonexistent/dir/x.json")


def test_writing_onto_a_folder_is_an_error(tmp_path):
    with pytest.raises(RopesplitError, match="it is a folder"):
        output_path(tmp_path)


def test_write_json_turns_nonfinite_into_null(tmp_path):
    import numpy as np

    p = write_json(tmp_path / "x.json", {"a": math.nan, "b": np.float64(1.5), "c": np.arange(3)})
    assert json.loads(p.read_text()) == {"a": None, "b": 1.5, "c": [0, 1, 2]}


def test_user_error_exit_code_and_no_traceback(capsys, monkeypatch):
    import ropesplit.commands.derive as derive

    def boom(args):
        raise RopesplitError("head_dim must be even, got 63")

    monkeypatch.setattr(derive, "run", boom)
    assert main(["derive"]) == 2
    err = capsys.readouterr().err
    assert err == "ropesplit derive: error: head_dim must be even, got 63\n"


def test_console_entry_point_runs_as_module():
    out = subprocess.run(
        [sys.executable, "-m", "ropesplit", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("ropesplit ")


# ---------------------------------------------------------------------- bad input, every option


def _subparsers() -> dict:
    parser = build_parser()
    return dict(next(a for a in parser._actions if a.dest == "command").choices or {})


def _bad_values(action) -> list[str]:
    """Wrong-typed and out-of-range values for one option, from how it is declared."""
    from ropesplit.commands._types import IntAtLeast, device, dtype, positive_float

    if action.choices is not None:
        return ["nonsense"]
    if action.type is device:
        return ["quantum", "cuda:99", "cuda:x"]
    if action.type is dtype:
        return ["float33"]
    if action.type is positive_float:
        return ["abc", "nan", "inf", "-1", "0"]
    if isinstance(action.type, IntAtLeast):
        return ["abc", "1.5", str(action.type.minimum - 1)]
    return []


CASES = [
    (name, action.option_strings[-1], value)
    for name, sub in _subparsers().items()
    for action in sub._actions
    if action.option_strings
    for value in _bad_values(action)
]


def test_every_numeric_or_choice_option_is_swept():
    """The sweep sees every option that has a type or choices; none is left unchecked."""
    for name, sub in _subparsers().items():
        for action in sub._actions:
            if action.type in (int, float):
                raise AssertionError(f"{name} {action.option_strings}: no central range check")
    assert len({(c, o) for c, o, _ in CASES}) >= 20


@pytest.mark.parametrize(("command", "option", "value"), CASES,
                         ids=[f"{c}{o}={v}" for c, o, v in CASES])  # fmt: skip
def test_bad_option_values_are_one_line_exit_2(command, option, value, capsys):
    assert main([command, option, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ropesplit {command}: error: argument {option}"), err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["analyze", "--device", "quantum"], "argument --device: must be cpu, cuda[:N] or mps"),
        (["analyze", "--device", "cuda:7"], "argument --device: 'cuda:7': this machine has"),
        (["report", "--out", "FILE"], "cannot write FILE: it is a file, not a folder"),
    ],
    ids=["unknown-device", "absent-cuda", "out-is-a-file"],
)
def test_a_new_users_bad_inputs_through_the_console_script(argv, message, tmp_path):
    """Bad inputs as a new user tried them: one line, exit 2, no traceback."""
    existing = tmp_path / "x.html"
    existing.write_text("")
    argv = [str(existing) if a == "FILE" else a for a in argv]
    out = subprocess.run([sys.executable, "-m", "ropesplit", *argv], capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"ropesplit {argv[0]}: error: ")
    assert message.replace("FILE", str(existing)) in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
