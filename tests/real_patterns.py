"""Real models' layer patterns, built tiny and analysed layer by layer.

tests/data/real_layer_patterns.json holds, per published model, the fields of
its config.json that decide which layer is which kind (``layer_types``,
``no_rope_layers``, ``sliding_window_pattern``, ``full_attention_interval``,
...), the model id and where the values were read. Each model is built at the
tiny width of tests/families.py (its family's tiny config) but with the first
``tiny_layers`` layers of its real pattern, enough to hold every kind of layer
it has, and ``ropesplit analyze`` runs on it. A layer is one of three kinds:

- ``rope``: softmax attention that turns q and k by RoPE, to be analysed;
- ``nope``: softmax attention without RoPE (the family's rule in the fixture);
- ``linear``: a linear-attention or recurrent layer (no softmax, no RoPE).

The table says which layers the analysis record lists as analysed
(``layers_analysed``) and which as not (``layers_not_analysed``, with the
kind it gives). ``python tests/real_patterns.py`` rewrites the table in
docs/analyse-your-model.md from a fresh run.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import families  # noqa: E402  (tests/ is not a package)

FIXTURE = Path(__file__).parent / "data" / "real_layer_patterns.json"
START, END = "<!-- patterns:start -->", "<!-- patterns:end -->"
# config fields besides the layer kinds that shape the first layers (dense before MoE, the
# chunk of chunked attention): set on the tiny config where its family has them
PASSED = ("first_k_dense_replace", "num_dense_layers", "interleave_moe_layer_step",
          "moe_layer_freq", "attention_chunk_size")  # fmt: skip


@dataclass(frozen=True)
class Run:
    name: str
    model_id: str
    model_type: str
    layers: int  # of the real pattern
    kinds: tuple[str, ...]  # of the tiny's layers, from the fixture: rope, nope or linear
    status: str  # families.Family's: analysed, refused (traceback fails the test)
    reason: str
    analysed: tuple[int, ...] | None  # the record's layers_analysed (None: not reported)
    not_analysed: tuple[tuple[int, str], ...] | None  # the record's layers_not_analysed


def models() -> list[dict[str, Any]]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))["models"]


def layer_types(config: dict[str, Any]) -> list[str]:
    """The attention kind of every layer, as transformers derives it from these fields."""
    n = config["num_hidden_layers"]
    if "layer_types" in config:
        return list(config["layer_types"])
    if "full_attention_interval" in config:  # Qwen3-Next, Qwen3.5: one softmax layer in k
        k = config["full_attention_interval"]
        return ["full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(n)]
    for key in ("sliding_window_pattern", "global_attn_every_n_layers"):
        if key in config:  # every k-th layer global, the others sliding
            k = config[key]
            return ["full_attention" if (i + 1) % k == 0 else "sliding_attention"
                    for i in range(n)]  # fmt: skip
    if "attention_chunk_size" in config:  # Llama 4: the NoPE layers attend fully
        return ["chunked_attention" if r else "full_attention" for r in config["no_rope_layers"]]
    return ["full_attention"] * n


def kinds(model: dict[str, Any]) -> list[str]:
    """rope, nope or linear for every layer of the real pattern."""
    config = model["config"]
    types = layer_types(config)
    no_rope = config.get("no_rope_layers", [1] * len(types))
    out = []
    for kind, rope in zip(types, no_rope, strict=True):
        if kind == "linear_attention":
            out.append("linear")
        elif not rope or kind == model.get("nope_layer_type"):
            out.append("nope")
        else:
            out.append("rope")
    return out


def tiny_fields(model: dict[str, Any]) -> dict[str, Any]:
    """The fields set on the family's tiny config: the first ``tiny_layers`` of the pattern."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config, n = model["config"], model["tiny_layers"]
    known = CONFIG_MAPPING[model["model_type"]]().to_dict()
    fields: dict[str, Any] = {"num_hidden_layers": n, "layer_types": layer_types(config)[:n]}
    if "no_rope_layers" in config:
        fields["no_rope_layers"] = config["no_rope_layers"][:n]
    fields.update({key: config[key] for key in PASSED if key in config and key in known})
    return fields


def analyse(model: dict[str, Any], root: Path) -> Run:
    name = model["model_id"].replace("/", "--")
    with families._quiet():
        fields = tiny_fields(model)
    f = families.analyse(model["model_type"], root, name=name, **fields)
    record = f.record or {}
    analysed, skipped = record.get("layers_analysed"), record.get("layers_not_analysed")
    return Run(
        model["name"], model["model_id"], model["model_type"], model["config"]["num_hidden_layers"],
        tuple(kinds(model)[: model["tiny_layers"]]), f.status, f.reason,
        None if analysed is None else tuple(analysed),
        None if skipped is None else tuple((s["layer"], s["kind"]) for s in skipped),
    )  # fmt: skip


def run_all(root: Path | None = None) -> list[Run]:
    with contextlib.ExitStack() as stack:
        base = Path(root) if root else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        return [analyse(model, base) for model in models()]


def _layers(run: Run) -> tuple[str, str]:
    """The analysed and not-analysed cells of a row, as the record gives them."""
    if run.status != "analysed":
        return "—", run.reason.replace("|", "/")
    if run.analysed is None:
        return "not reported", "not reported"
    done = ", ".join(str(i) for i in run.analysed) or "none"
    rest = ", ".join(f"{i} ({kind})" for i, kind in run.not_analysed or ()) or "none"
    return f"{len(run.analysed)} of {len(run.kinds)}: {done}", rest


def table(runs: list[Run]) -> str:
    """The Markdown table of the docs: model, pattern kept, status, layers analysed or not."""
    import transformers

    done = sum(r.status == "analysed" for r in runs)
    lines = [f"transformers {transformers.__version__}: {len(runs)} published layer patterns, "
             f"{done} analysed, {len(runs) - done} refused.", "",
             "| model | family | layers kept (of the real) | pattern kept | status "
             "| layers analysed | layers not analysed (kind) |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in runs:
        analysed, rest = _layers(r)
        lines.append(f"| {r.name} (`{r.model_id}`) | `{r.model_type}` | {len(r.kinds)} of "
                     f"{r.layers} | {' '.join(r.kinds)} | {r.status} | {analysed} | {rest} |")
    return "\n".join(lines)


def documented() -> str:
    """The table as docs/analyse-your-model.md holds it."""
    text = families.DOC.read_text(encoding="utf-8")
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def write_doc(runs: list[Run]) -> None:
    text = families.DOC.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    families.DOC.write_text(f"{head}{START}\n{table(runs)}\n{END}{rest.split(END, 1)[1]}",
                            encoding="utf-8")  # fmt: skip


if __name__ == "__main__":
    write_doc(run_all())
    print(documented())
