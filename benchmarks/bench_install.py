"""Time `make` targets on a fresh clone and write the times into docs/install.md.

    python benchmarks/bench_install.py test report     # clone HEAD, time `make test`, `make report`
    python benchmarks/bench_install.py --record "make test (CI)=527" --date 2026-12-05
    python benchmarks/bench_install.py                 # print the timings docs/install.md holds

docs/install.md quotes no time of its own: every time on it is a row of the block between
``<!-- timings: begin (written by benchmarks/bench_install.py) -->`` and
``<!-- timings: end -->``, which this script rewrites. Each row names what was timed, the
seconds, the date and the machine (CPU count and model). A new row replaces the row with the
same ``what``; the others stay (``--replace`` drops them all).

Targets are timed one after another in one clone of the repository's committed HEAD
(``git clone``; the working tree is not copied), so the first includes the install into a
new ``.venv`` and the later ones reuse it. ``--record WHAT=SECONDS`` writes a time measured
elsewhere (in CI, say); ``--date`` and ``--machine`` then say when and where. With no targets
and no records the block is printed and nothing is written (this is what ``make bench``
does). A failed target exits 1; bad input is a one-line error with exit code 2.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "install.md"
BEGIN = "<!-- timings: begin (written by benchmarks/bench_install.py) -->"
END = "<!-- timings: end -->"
HEADER = ("| what | seconds | date | machine |", "|------|--------:|------|---------|")


class BadInput(Exception):
    """A one-line error for the user: exit code 2."""


@dataclass(frozen=True)
class Row:
    what: str
    seconds: float
    date: str  # ISO, YYYY-MM-DD
    machine: str

    def line(self) -> str:
        return f"| {self.what} | {self.seconds:g} | {self.date} | {self.machine} |"


def machine() -> str:
    """``N CPU cores, MODEL``: the cores this process may use and the CPU model."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M)
        model = found.group(1).strip() if found else ""
    model = model or platform.processor() or platform.machine() or "unknown CPU"
    return f"{cores} CPU core{'s' if cores != 1 else ''}, {model}"


def split_page(text: str) -> tuple[str, str, str]:
    """The page before the block, the block (markers included) and the page after it."""
    start, stop = text.find(BEGIN), text.find(END)
    if start < 0 or stop < start:
        raise BadInput(f"the page has no block between '{BEGIN}' and '{END}'")
    stop += len(END)
    return text[:start], text[start:stop], text[stop:]


def parse_block(block: str) -> list[Row]:
    """The rows of a block that :func:`render_block` wrote."""
    rows = []
    for line in block.splitlines():
        if not line.startswith("| ") or line in HEADER:
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if len(cells) != 4:
            raise BadInput(f"a timings row has {len(cells)} cells, not 4: {line}")
        rows.append(Row(cells[0], float(cells[1]), cells[2], cells[3]))
    return rows


def render_block(rows: list[Row]) -> str:
    return "\n".join([BEGIN, *HEADER, *(row.line() for row in rows), END])


def merge(old: list[Row], new: list[Row]) -> list[Row]:
    """``old`` with each row of ``new`` in place of the row with its ``what`` (else appended)."""
    by_what = {row.what: row for row in new}
    kept = [by_what.pop(row.what, row) for row in old]
    return kept + [row for row in new if row.what in by_what]


def write(page: Path, rows: list[Row], replace: bool = False) -> str:
    """Rewrite the block of ``page`` with ``rows`` merged into its own; returns the block."""
    before, block, after = split_page(page.read_text(encoding="utf-8"))
    block = render_block(rows if replace else merge(parse_block(block), rows))
    page.write_text(before + block + after, encoding="utf-8")
    return block


def parse_record(text: str) -> tuple[str, float]:
    what, sep, seconds = text.rpartition("=")
    try:
        value = float(seconds)
    except ValueError:
        value = -1.0
    if not sep or not what.strip() or "|" in what or not value > 0:
        raise BadInput(f"--record takes WHAT=SECONDS (seconds > 0, no '|'), not {text!r}")
    return what.strip(), value


def time_targets(targets: list[str], date: str, where: str) -> list[Row]:
    """Clone HEAD into a temporary folder and time ``make TARGET`` for each target, in order."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_install-") as tmp:
        clone = Path(tmp) / "ropesplit"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        for i, target in enumerate(targets):
            start = time.perf_counter()
            done = subprocess.run(["make", target], cwd=clone)
            seconds = round(time.perf_counter() - start, 1)
            if done.returncode != 0:
                print(f"make {target} failed (exit {done.returncode})", file=sys.stderr)
                raise SystemExit(1)
            how = "fresh clone, install included" if i == 0 else "after the install"
            rows.append(Row(f"`make {target}`, {how}", seconds, date, where))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", help="make targets to time on a fresh clone")
    parser.add_argument("--record", action="append", default=[], metavar="WHAT=SECONDS",
                        help="a time measured elsewhere")  # fmt: skip
    parser.add_argument("--date", default=datetime.date.today().isoformat(),
                        help="the date of --record times (default today)")  # fmt: skip
    parser.add_argument(
        "--machine", default=None, help="where --record times were measured (default this machine)"
    )
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--replace", action="store_true", help="drop the rows already there")
    args = parser.parse_args(argv)
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", args.date):
            raise BadInput(f"--date takes YYYY-MM-DD, not {args.date!r}")
        if not args.page.is_file():
            raise BadInput(f"no page {args.page}")
        where = args.machine or machine()
        records = [parse_record(text) for text in args.record]
        if not args.targets and not records:
            print(split_page(args.page.read_text(encoding="utf-8"))[1])
            return 0
        rows = [Row(what, seconds, args.date, where) for what, seconds in records]
        if args.targets:
            today = datetime.date.today().isoformat()
            rows += time_targets(args.targets, today, machine())
        print(write(args.page, rows, args.replace))
    except BadInput as exc:
        print(f"bench_install: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
