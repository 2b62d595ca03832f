"""``ropesplit derive``: check every step of docs/theory.md with sympy and write the derivation.

Without ``--check`` the steps are listed (id, kind, then what the step
states, its section of docs/theory.md and the paper's claim it rests) and
nothing is claimed checked; with ``--check`` every step's symbolic check
runs, one line per step (id, kind, ``checked`` or ``FAILED``, seconds, then
its statement), and the exit code is
1 if any fails; the last line gives the count and the total seconds.  ``--out``
writes the derivation as Markdown with LaTeX math; ``--json`` writes
``{"steps": [...], "all_checked": bool, "seconds": total or None}``.
"""

from __future__ import annotations

import argparse
import textwrap

from ropesplit.commands import write_output
from ropesplit.commands._types import OutputPath

HELP = "derive and machine-check every step of docs/theory.md (sympy); write the derivation"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags: ``--check``, ``--out PATH`` (Markdown), ``--json PATH``."""
    parser.add_argument("--check", action="store_true",
                        help="run every step's symbolic check; exit 1 if any fails")
    parser.add_argument("--out", metavar="PATH", type=OutputPath,
                        help="write the derivation as Markdown")
    parser.add_argument("--json", metavar="PATH", type=OutputPath,
                        help="write the per-step results as JSON")


def run(args: argparse.Namespace) -> int:
    """List or check the steps, print one line each, write the requested files."""
    from ropesplit.theory import STEPS, derivation_markdown, derive_record
    from ropesplit.theory.derivation import where

    results = {step.id: step.check() for step in STEPS} if args.check else {}
    record = derive_record(results)
    width = max(len(step.id) for step in STEPS)
    for step in STEPS:
        r = results.get(step.id)
        status = "not run" if r is None else ("checked" if r.checked else "FAILED")
        seconds = "" if r is None else f"  {r.seconds:6.2f} s"
        print(f"{step.id:<{width}}  {step.kind:<10}  {status:<7}{seconds}")
        print(textwrap.fill(f"{step.statement} ({where(step.id)})", 100,
                            initial_indent="    ", subsequent_indent="    "))
        if r is not None and not r.checked:
            print(f"    {r.detail}")
    all_checked, total = record["all_checked"], record["seconds"]
    write_output(args.out, text=derivation_markdown(results))
    write_output(args.json, record)
    if not args.check:
        return 0
    n_ok = sum(r.checked for r in results.values())
    print(f"{n_ok}/{len(STEPS)} steps checked in {total:.2f} s"
          + ("" if all_checked else "; some FAILED"))
    return 0 if all_checked else 1
