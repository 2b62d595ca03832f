"""Every RoPE causal-LM family of the installed transformers, built tiny and analysed.

The families come from transformers' own auto mappings
(``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``), kept where the family's own config
states RoPE (:func:`ropesplit.empirical.adapter.carries_rope`; a multimodal
wrapper whose RoPE sits in a sub-config is listed under its text family).
Each is shrunk to a tiny random-init model by the fields its config has,
saved with a byte-level tokenizer, and run through ``ropesplit analyze``
(in process). It ends in one of two states:

- ``analysed``: exit code 0, the capture validated (RoPE, logits and
  probabilities within the dtype's tolerances);
- ``refused``: a non-zero exit code with one line on stderr, the reason.

Anything else (a traceback) fails the test that runs it. ``python
tests/families.py`` rewrites the table in docs/analyse-your-model.md from a
fresh run.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropesplit.core.errors import one_line

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "analyse-your-model.md"
START, END = "<!-- families:start -->", "<!-- families:end -->"
TOKENS = 24
TEXT = "Rotary position embeddings turn each pair of coordinates by an angle. " * 4
MAX_PARAMETERS = 20_000_000  # a config that did not shrink is not built
# the families that must be analysed with the capture validated
REQUIRED = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text",
            "phi3", "gpt_neox", "olmo2", "granite", "cohere", "stablelm", "gptj")  # fmt: skip
# GPT-J's attention calls transformers' attention registry from 5.24 on; before, it is a
# private method (GPTJAttention._attn) that no public seam reaches, and GPT-J is refused
GPTJ_SINCE = (5, 24)


def required() -> tuple[str, ...]:
    """:data:`REQUIRED` as the installed transformers can meet it (see :data:`GPTJ_SINCE`)."""
    import transformers

    version = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    return REQUIRED if version >= GPTJ_SINCE else tuple(f for f in REQUIRED if f != "gptj")

# the tiny shape, field by field where the family's config has the field
TINY: dict[str, Any] = {
    "vocab_size": 256, "hidden_size": 64, "n_embd": 64, "d_model": 64,
    "intermediate_size": 64, "n_inner": 64, "ffn_hidden_size": 64,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "expert_intermediate_size": 32, "moe_ffn_hidden_size": 32,
    "num_hidden_layers": 2, "n_layer": 2, "num_layers": 2,
    "num_attention_heads": 4, "n_head": 4, "num_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "rotary_dim": 8,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2, "top_k": 2,
    "max_position_embeddings": 64, "n_positions": 64, "sliding_window": 8,
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": 16, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "num_kv_shared_layers": 0,
}  # fmt: skip


@dataclass(frozen=True)
class Family:
    model_type: str
    status: str  # "analysed" or "refused" ("traceback" fails the test)
    reason: str  # the refusal's line, or the validation numbers


def rope_families() -> list[str]:
    """Model types of the causal-LM mapping whose own config states RoPE, sorted; one whose
    default config cannot be made is listed too (it is refused, with the reason)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from ropesplit.empirical.adapter import carries_rope

    out = []
    with _quiet():
        for model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            try:
                config = CONFIG_MAPPING[model_type]()
            except Exception:  # listed, and refused by analyse: its config cannot be made
                out.append(model_type)
                continue
            if carries_rope(config):
                out.append(model_type)
    return sorted(out)


@contextlib.contextmanager
def _quiet() -> Any:
    from transformers.utils import logging

    logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def tiny_config(model_type: str) -> Any:
    """The family's config with every field of :data:`TINY` it has set to the tiny shape."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    fields = cls().to_dict()
    kwargs = {name: value for name, value in TINY.items() if name in fields}
    if isinstance(fields.get("layer_types"), list):
        kwargs["layer_types"] = fields["layer_types"][: kwargs.get("num_hidden_layers", 2)]
    return cls(**kwargs)


def build(model_type: str, folder: Path) -> str | None:
    """A tiny random-init model of the family saved in ``folder``; the reason if not."""
    import torch
    from conftest import byte_tokenizer
    from transformers import AutoModelForCausalLM

    try:
        config = tiny_config(model_type)
        with torch.device("meta"):
            size = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
        if size > MAX_PARAMETERS:
            return f"the tiny config keeps {size / 1e6:.0f}M parameters (not built)"
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    except Exception as exc:  # transformers refuses the tiny shape itself
        return f"transformers cannot build a tiny {model_type}: {one_line(exc)}"
    byte_tokenizer().save_pretrained(folder)
    return None


def analyse(model_type: str, root: Path) -> Family:
    """``ropesplit analyze`` on the family's tiny model: analysed or refused, with why."""
    from ropesplit.cli import main

    folder, text, record = root / model_type, root / "text.txt", root / f"{model_type}.json"
    text.write_text(TEXT)
    with _quiet():
        reason = build(model_type, folder)
    if reason is not None:
        return Family(model_type, "refused", reason)
    err = io.StringIO()
    with _quiet(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(["analyze", "--model", str(folder), "--text", str(text), "--tokens",
                         str(TOKENS), "--no-control", "--json", str(record)])  # fmt: skip
        except Exception as exc:  # what a user would see as a traceback
            return Family(model_type, "traceback", f"{type(exc).__name__}: {one_line(exc)}")
    lines = [line for line in err.getvalue().splitlines() if "error:" in line]
    if code == 0:
        v = json.loads(record.read_text())
        return Family(model_type, "analysed",
                      f"probabilities {v['reconstruction_max_abs_diff']:.0e}, logits "
                      f"{v['logit_max_rel_diff']:.0e}, RoPE {v['rope_max_rel_diff']:.0e}")
    assert "Traceback" not in err.getvalue(), (model_type, err.getvalue())
    assert len(lines) == 1, (model_type, err.getvalue())
    reason = lines[0].split("error: ", 1)[1]
    return Family(model_type, "refused", re.sub(r"/\S*/" + model_type, model_type, reason))


def run_all(root: Path | None = None) -> list[Family]:
    with contextlib.ExitStack() as stack:
        base = Path(root) if root else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        return [analyse(model_type, base) for model_type in rope_families()]


def table(families: list[Family]) -> str:
    """The Markdown table of the docs: family, status, reason; analysed first."""
    import transformers

    rows = sorted(families, key=lambda f: (f.status != "analysed", f.model_type))
    done = sum(f.status == "analysed" for f in families)
    lines = [f"transformers {transformers.__version__}: {len(families)} RoPE causal-LM "
             f"families, {done} analysed, {len(families) - done} refused.", "",
             "| family | status | reason or validation (max differences) |",
             "|---|---|---|"]  # fmt: skip
    lines += [f"| `{f.model_type}` | {f.status} | {f.reason.replace('|', '/')} |" for f in rows]
    return "\n".join(lines)


def documented() -> str:
    """The table as docs/analyse-your-model.md holds it."""
    text = DOC.read_text(encoding="utf-8")
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def write_doc(families: list[Family]) -> None:
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    DOC.write_text(f"{head}{START}\n{table(families)}\n{END}{rest.split(END, 1)[1]}",
                   encoding="utf-8")  # fmt: skip


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    write_doc(run_all())
    print(documented())
