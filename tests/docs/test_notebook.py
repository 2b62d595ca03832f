"""The teaching notebook: committed without outputs, and it runs top to bottom.

``docs/notebooks/*.ipynb`` run in a real Jupyter kernel (nbclient + ipykernel,
from the ``notebook`` extra) on the fast path: synthetic heads and a tiny
Llama built in memory. ``ROPESPLIT_NOTEBOOK_MODEL=1`` makes the same run use
the embedded SmolLM2-135M (slow; not the default).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the notebook, top to bottom (make test-fast leaves it out)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "docs" / "notebooks").glob("*.ipynb"))
nbformat = pytest.importorskip("nbformat")


def test_there_is_a_notebook():
    assert [p.name for p in NOTEBOOKS] == ["rope-to-split.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    """Outputs would go stale; the notebook is valid and carries none."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, cell.source[:80]
    assert set(nb.metadata) <= {"kernelspec", "language_info"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path, monkeypatch):
    """Every cell runs in order in a fresh kernel; the figures come out inline."""
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    if os.environ.get("ROPESPLIT_NOTEBOOK_MODEL") != "1":
        monkeypatch.delenv("ROPESPLIT_NOTEBOOK_MODEL", raising=False)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(path, as_version=4)
    where = {"metadata": {"path": str(path.parent)}}
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3", resources=where)
    client.execute()  # raises CellExecutionError, with the cell and traceback, on a failure
    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    assert len(images) >= 5
    text = "".join(out.get("text", "") for out in outputs)
    assert "r_split: reference distance 0" in text

