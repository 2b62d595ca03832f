r"""Figures drawn from recorded runs: the gallery's intervention figures (13-16).

The interventions run for minutes, so the gallery keeps their records
(``ropesplit perturb --experiment NAME --json``, one JSON per experiment in
``docs/figures/records/``) and draws the figures from them:

    .venv/bin/python -m ropesplit.figures.recorded docs/figures/records docs/figures

``tests/test_docs.py`` fails when ``docs/figures`` is not what this draws.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ropesplit.figures.gather import intervention_data
from ropesplit.figures.interventions import INTERVENTION_FIGURES
from ropesplit.figures.registry import write_figures
from ropesplit.io import read_json

__all__ = ["draw_recorded"]


def draw_recorded(records: str | Path, out: str | Path) -> list[Path]:
    """Each intervention figure whose record ``records/NAME.json`` exists, drawn into ``out``
    at two-column width as PNG (the gallery's form)."""
    folder = Path(records)
    data = {name: intervention_data(read_json(folder / f"{name}.json", "record"), name)
            for name in INTERVENTION_FIGURES if (folder / f"{name}.json").is_file()}  # fmt: skip
    return write_figures(data, out, widths=("double",), formats=("png",))


if __name__ == "__main__":  # pragma: no cover
    for path in draw_recorded(sys.argv[1], sys.argv[2]):
        print(f"wrote {path}", file=sys.stderr)
