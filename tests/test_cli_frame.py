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
from ropesplit.io import output_path, write_json


def test_every_listed_subcommand_is_registered_in_order():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    names = list(sub.choices)
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
