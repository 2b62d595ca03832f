"""The one registry of per-head statistic names (numerics.statistics) and what reads it."""

from __future__ import annotations

import subprocess
import sys
import typing
from dataclasses import fields

import pytest

from ropesplit.numerics.statistics import STATISTICS, names
from ropesplit.numerics.stats import HeadStats


def test_the_registry_names_every_statistic_head_stats_computes():
    """Each float field of HeadStats is one registry entry, in the same order, and no more."""
    hints = typing.get_type_hints(HeadStats)
    floats = tuple(f.name for f in fields(HeadStats) if hints[f.name] is float)
    assert names() == floats
    assert len({s.name for s in STATISTICS}) == len(STATISTICS)


def test_the_subsets_keep_the_registry_order():
    for where in ("table", "training"):
        chosen = names(where)
        assert chosen == tuple(n for n in names() if n in chosen)
    assert "tightness_median" not in names("table")
    with pytest.raises(ValueError, match="where must be"):
        names("figure")


def test_every_reader_lists_the_registry():
    """The analysis, tidy tables, training and the report read the names from the registry."""
    from ropesplit.empirical.analysis import analyze
    from ropesplit.report.sections import emergence, empirical

    assert analyze.STATISTICS == names()
    assert empirical.STATS == names("table")
    assert emergence._STATS == names("training")


def test_the_registry_imports_without_numpy():
    code = ("import sys, ropesplit.numerics.statistics; "
            "assert 'numpy' not in sys.modules, 'numpy imported'")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True)
