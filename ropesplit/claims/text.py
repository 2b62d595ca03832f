"""The words of the claims: each condition, claim, record and models x claims table in the
lines the CLI prints and the report shows (one place each is worded)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["claim_line", "compare_table", "condition_label", "condition_text", "condition_word",
           "interval_text", "summary"]


def condition_label(c: Any) -> str:
    """What a condition reads: its measure, or ``measure - null`` for a paired one (a
    :class:`Condition`, a :class:`Secondary` or a record's entry of either)."""
    get = c.get if isinstance(c, Mapping) else lambda key: getattr(c, key)
    return str(get("measure")) if get("compare") == "level" else f"{get('measure')} - {get('null')}"


def interval_text(interval: Mapping[str, Any] | None, number: Any = "{:.3f}".format) -> str:
    """An interval as ``mean [low, high]`` (``number`` formats each), or n/a: the CLI's and
    the report's."""
    if not interval:
        return "n/a"
    return f"{number(interval['mean'])} [{number(interval['low'])}, {number(interval['high'])}]"


def condition_text(c: Mapping[str, Any], number: Any = "{:.3f}".format) -> str:
    """A record's condition in one line, the one place it is worded (the CLI, the report):
    ``r_split 0.912 [0.897, 0.927] over passages (predicted > 0.9, toolkit's threshold)``;
    ``number`` formats the interval's numbers."""
    shown = interval_text(c.get("interval"), number)
    side = ">" if c["direction"] == "above" else "<"
    origin = f", {c['origin']}'s threshold" if c.get("origin") else ""
    return (f"{condition_label(c)} {shown} over {c.get('unit', 'passages')} "
            f"(predicted {side} {c['threshold']:g}{origin})")  # fmt: skip


def condition_word(condition: Mapping[str, Any]) -> str:
    """A condition's ``outcome`` in the verdict words: on the wrong side of a toolkit's
    threshold reads "weaker than the paper", of the paper's own "disagrees"."""
    if condition["outcome"] == "disagrees" and condition["origin"] != "paper":
        return "weaker than the paper"
    return str(condition["outcome"])


def claim_line(claim: dict[str, Any]) -> str:
    """One claim in a few lines: verdict, each condition's interval with its threshold's
    origin, the nulls, the gate (positive control), the secondaries (Holm-corrected p where
    tested), the robustness over the grid."""
    parts = [condition_text({"unit": claim["unit"], **c}) for c in claim["conditions"]]
    nulls = ", ".join(f"{n['measure']} {interval_text(n['interval'])}" for n in claim["nulls"])
    line = (f"claim {claim['claim']}: {claim['verdict'].upper()} (n = {claim['n']} "
            f"{claim['unit']}): " + "; ".join(parts))  # fmt: skip
    if nulls:
        line += f"\n    null: {nulls}"
    gate = claim.get("gate")
    if gate:  # the positive control: failing it makes the claim inconclusive
        line += f"\n    gate: {condition_text(gate)}: {gate['outcome']}"
    for s in claim.get("secondary", []):  # shown, never deciding
        holm = s.get("p_holm")
        tested = f", Holm p {holm:.3g}" if isinstance(holm, float) and holm == holm else ""
        line += f"\n    secondary: {condition_text(s)}{tested}"
    if claim.get("robust_statement"):
        line += f"\n    grid: {claim['robust_statement']}"
    return line


def summary(record: dict[str, Any]) -> str:
    """A claims record as the CLI prints it: the run in two lines (and what a partial merge
    leaves out), then :func:`claim_line` of each claim."""
    head = record["header"]
    shards = ", ".join(f"{a}:{b}" for a, b in head.get("shards", []))
    grid = head.get("grid", {})
    lines = [f"{head['model']}: corpora {', '.join(head.get('corpora', [head['corpus']]))}, "
             f"{head['passages']} passages each ({head['order_passages']} for word order), "
             f"tokens {grid.get('tokens', [head['tokens']])} (headline {head['tokens']}, "
             f"{head['corpus']}), twin seeds {head['control_seeds']}; passages measured here "
             f"{shards}", f"power: {head['power']}"]  # fmt: skip
    if head.get("partial"):
        lines.insert(1, f"partial: {head['partial']}")
    lines += [claim_line(c) for c in record["claims"]]
    return "\n".join(lines)


def compare_table(compare: dict[str, Any]) -> str:
    """The models x claims table of a compare record, one line per model and claim, with
    every primary condition's estimate."""
    lines = ["model | claim | verdict | every primary condition [95%] | robustness"]
    for row in compare["rows"]:
        shown = "; ".join(f"{condition_label(c)} {interval_text(c['estimate'])}"
                          for c in row["conditions"])  # fmt: skip
        lines.append(f"{row['model']} | {row['claim']} | {row['verdict']} | {shown} | "
                     f"{row['robust_statement']}")  # fmt: skip
    return "\n".join(lines)
