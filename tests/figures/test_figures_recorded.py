"""Figure data kept as JSON records (the gallery's): exact round trip, and the same figure bytes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_figures import KWARGS, THETA, figure_kwargs
from test_figures_emergence import _record

from ropesplit.core.errors import RopesplitError
from ropesplit.core.io import write_json
from ropesplit.figures import FIGURES, write_figures
from ropesplit.figures.emergence import bothways_data, emergence_data
from ropesplit.figures.recorded import (
    FORMAT,
    decode,
    draw_recorded,
    encode,
    main,
    read_records,
    write_records,
)


def _all_figures() -> dict[str, dict]:
    """Keyword arguments of all eighteen figures, tiny and synthetic."""
    rng = np.random.default_rng(0)
    ci = {"mean": 0.8, "low": 0.7, "high": 0.9}
    data = {name: figure_kwargs(name) for name in KWARGS}
    data["reference"] = {"series": {"trained": {"zero": ci, "mean": ci},
                                    "random init": {"zero": None, "mean": ci}}, "paper": 0.959}
    data["reference_pairs"] = {"theta": THETA, "m_abs": np.array([0.0, 0.2, 0.7, 1.0]),
                               "energy_k": rng.uniform(0.1, 1.0, (3, 4)),
                               "energy_k_control": None}  # fmt: skip
    data |= emergence_data(_record())
    data |= {"recall_emergence": data["emergence"], "recall_pairs": data["emergence_pairs"]}
    one = _record(bases=(10000.0,), seeds=(0,))
    data["bothways"] = bothways_data(_record(), {"text": one, "proteins": one})
    assert set(data) == {spec.name for spec in FIGURES}
    return data


def _same(a, b, where="data") -> None:
    """``b`` is ``a`` value for value: types, dtypes, shapes, bits (NaN as NaN, -0.0 as -0.0)."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), where
        assert (a.dtype, a.shape) == (b.dtype, b.shape), where
        assert a.tobytes() == b.tobytes(), where
    elif isinstance(a, dict):
        assert type(b) is dict and list(a) == list(b), where
        for key in a:
            _same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(b) is type(a) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert type(b) is float, where
        assert (a == b or (math.isnan(a) and math.isnan(b))), where
        assert math.copysign(1.0, a) == math.copysign(1.0, b), where
    else:
        assert type(b) is type(a) and a == b, where


def _through_json(value):
    return decode(json.loads(json.dumps(encode(value), allow_nan=False)))


def test_values_round_trip_exactly_nan_and_infinities_included():
    value = {
        "W": np.array([[0.1, -0.0], [np.nan, np.inf]]),
        "mask": np.tril(np.ones((3, 3), dtype=bool)),
        "counts": np.arange(4, dtype=np.int64).reshape(2, 2),
        "half": np.array([1 / 3, -np.inf], dtype=np.float32),
        "empty": np.zeros((0, 3)),
        "scalar": np.array(2.5),
        "distances": (1.0, 16, 150),
        "samples": {"layer 0 head 1": (np.array([1e-300, 5e300]), np.array([0.0, 1.0]))},
        "rows": [{"r_split": math.nan, "ci": math.inf, "low": -math.inf, "none": None,
                  "label": "x", "ok": True, "zero": -0.0, "tiny": 5e-324}],
    }  # fmt: skip
    _same(value, _through_json(value))
    # numpy scalars come back as the Python number of the same value
    back = _through_json({"f": np.float64(0.1), "i": np.int64(3), "b": np.bool_(True)})
    assert back == {"f": 0.1, "i": 3, "b": True}
    assert [type(v) for v in back.values()] == [float, int, bool]


def test_nan_survives_a_record_where_plain_write_json_writes_null(tmp_path):
    rows = [{"layer": 0, "head": 0, "r_split": math.nan}, {"layer": 0, "head": 1, "r_split": 0.5}]
    write_records({"r_split": {"heads": rows, "control_heads": None}}, tmp_path)
    back = read_records(tmp_path)["r_split"]
    assert math.isnan(back["heads"][0]["r_split"]) and back["control_heads"] is None
    write_json(tmp_path / "plain.json", rows)  # the reason for the tags: null is not NaN
    assert json.loads((tmp_path / "plain.json").read_text())[0]["r_split"] is None


def test_records_hold_each_figure_with_its_number_and_source(tmp_path):
    data = _all_figures()
    paths = write_records(data, tmp_path / "records", source={"model": "tiny", "seed": 0})
    tmp_path = tmp_path / "records"  # created: only it was missing
    assert [p.name for p in paths] == [f"{spec.name}.json" for spec in FIGURES]
    record = json.loads((tmp_path / "decomposition.json").read_text())
    assert (record["format"], record["figure"], record["number"]) == (FORMAT, "decomposition", 1)
    assert record["source"] == {"model": "tiny", "seed": 0}
    back = read_records(tmp_path)
    assert list(back) == [spec.name for spec in FIGURES]
    for name in data:
        _same(data[name], back[name], name)


@pytest.mark.slow  # every figure
def test_records_redraw_every_figure_byte_for_byte(tmp_path):
    """What the records draw is what the data they were written from draws: all eighteen."""
    data = _all_figures()
    (tmp_path / "records").mkdir()
    (tmp_path / "direct").mkdir()
    (tmp_path / "recorded").mkdir()
    write_records(data, tmp_path / "records")
    direct = write_figures(data, tmp_path / "direct", widths=("double",), formats=("png",))
    recorded = draw_recorded(tmp_path / "records", tmp_path / "recorded")
    assert [p.name for p in recorded] == [p.name for p in direct]
    assert len(recorded) == len(FIGURES)
    for a, b in zip(direct, recorded, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_main_draws_the_gallery_and_names_what_has_no_record(tmp_path, capsys):
    (tmp_path / "records").mkdir()
    (tmp_path / "out").mkdir()
    write_records({"sweep": figure_kwargs("sweep")}, tmp_path / "records")
    assert main([str(tmp_path / "records"), str(tmp_path / "out")]) == 0
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["fig5-sweep-double.png"]
    assert "no record of decomposition, r_split" in capsys.readouterr().err
    assert main([]) == 2
    assert main([str(tmp_path / "missing"), str(tmp_path / "out")]) == 2
    assert "records folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"melt": {}}, "^unknown figure 'melt'"),
        ({"sweep": {"rows": [{1: 2.0}]}}, r"^sweep\['rows'\]\[0\]: keys must be strings"),
        ({"sweep": {"rows": [{"__float__": "nan"}]}}, "is reserved for the record's tags"),
        ({"sweep": {"rows": np.array(["a"], dtype=object)}}, "cannot record an array of dtype"),
        ({"sweep": {"rows": {1, 2}}}, r"^sweep\['rows'\]: cannot record a set"),
    ],
)
def test_write_records_refuses_what_it_cannot_give_back(tmp_path, data, message):
    with pytest.raises(RopesplitError, match=message):
        write_records(data, tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_read_records_refuses_other_files(tmp_path):
    write_json(tmp_path / "sweep.json", {"header": {}, "sweep": []})  # a perturb record
    with pytest.raises(RopesplitError, match="is not of format"):
        read_records(tmp_path)
    write_records({"bound": figure_kwargs("bound")}, tmp_path)
    (tmp_path / "sweep.json").write_text((tmp_path / "bound.json").read_text())
    with pytest.raises(RopesplitError, match="holds figure 'bound'"):
        read_records(tmp_path)
    with pytest.raises(RopesplitError, match="^records folder .* does not exist"):
        read_records(tmp_path / "missing")
    with pytest.raises(RopesplitError, match="^cannot write figure records to .*: folder"):
        write_records({"bound": figure_kwargs("bound")}, tmp_path / "a" / "b")


@pytest.mark.slow  # end to end, seconds: make test runs it, test-fast does not
def test_figures_drawn_side_by_side_are_the_bytes_drawn_in_one_process(tmp_path):
    # forked workers draw each file on its own figure: the same files, in the same order,
    # with the progress callback after each figure's last file
    data = {name: figure_kwargs(name) for name in ("decomposition", "sweep", "distance")}
    files, names = {}, {}
    for workers in (1, 2):
        (tmp_path / str(workers)).mkdir()
        seen: list[str] = []
        files[workers] = write_figures(data, tmp_path / str(workers), formats=("png", "pdf"),
                                       on_figure=seen.append, workers=workers)  # fmt: skip
        names[workers] = seen
    assert [p.name for p in files[1]] == [p.name for p in files[2]] and len(files[1]) == 12
    assert names[1] == names[2] == [s.name for s in FIGURES if s.name in data]
    for a, b in zip(files[1], files[2], strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
