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

The table states only what every machine reproduces: the status, a refusal's
cause, and for an analysed family the tolerances its residuals are within
(:func:`validated`). The residuals themselves are floating-point results that
differ between machines in their last digits (numbers are promised to
tolerances, not bits); they stay in each :class:`Family`'s record, and
tests/test_families.py holds them under the tolerances. A number that a
refusal's line measures is dropped from the table the same way
(:func:`stable`).

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
from dataclasses import dataclass, field
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
            "phi3", "gpt_neox", "olmo2", "granite", "cohere", "stablelm", "gptj",
            # the most used families of 2025-2026: hybrids, sinks, MLA, tables as applied
            "llama4_text", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next", "gpt_oss",
            "deepseek_v3", "deepseek_v32", "glm4", "glm_moe_dsa", "ernie4_5", "gemma3n_text",
            "gemma4_text", "phimoe")  # fmt: skip
ANALYSED_SHARE = 0.9  # at least this share of the families is analysed, capture validated
# GPT-J's attention calls transformers' attention registry from 5.24 on; before, it is a
# private method (GPTJAttention._attn) that no public seam reaches, and GPT-J is refused
GPTJ_SINCE = (5, 24)


def required() -> tuple[str, ...]:
    """:data:`REQUIRED` as the installed transformers can meet it: the families it ships
    (an older release has no Qwen3.5, say), GPT-J from :data:`GPTJ_SINCE` on."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    version = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    return tuple(f for f in REQUIRED if f in CONFIG_MAPPING_NAMES
                 and (f != "gptj" or version >= GPTJ_SINCE))  # fmt: skip

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
    "num_experts_per_tok": 2, "moe_topk": 2, "top_k": 2, "moe_k": 2, "num_experts_per_token": 2,
    "max_position_embeddings": 64, "n_positions": 64, "sliding_window": 8,
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": 16, "first_k_dense_replace": 1, "n_group": 1, "num_expert_group": 1,
    "topk_group": 1,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "num_kv_shared_layers": 0,
}  # fmt: skip
# the per-layer lists that say which kind each layer is (attention kind; 0 = NoPE)
PATTERN_FIELDS = ("layer_types", "no_rope_layers")

# per family, on top of TINY and of the layer pattern's prefix (see tiny_config): where the
# default config does not build, does not shrink, or keeps no layer of a kind the real
# checkpoints have; sizes follow the real models' ratios at the tiny width
_QWEN_LINEAR = {"linear_key_head_dim": 16, "linear_value_head_dim": 16,
                "linear_num_key_heads": 2, "linear_num_value_heads": 4}  # fmt: skip
_GEMMA_PER_LAYER_INPUT = {"vocab_size_per_layer_input": 256, "hidden_size_per_layer_input": 16}
OVERRIDES: dict[str, dict[str, Any]] = {
    # GatedDeltaNet heads shrunk (128-wide by default: 3M parameters), value heads 2x key heads
    "qwen3_next": _QWEN_LINEAR,
    "qwen3_5_text": _QWEN_LINEAR,
    "qwen3_5_moe_text": _QWEN_LINEAR,
    # + the QSA indexer's fields are None by default (the model cannot be built); a budget
    # above the tokens analysed, so every key stays attended
    "qwen4_exp_text": {**_QWEN_LINEAR, "indexer_n_heads": 4, "indexer_kv_heads": 1,
                       "indexer_head_dim": 16, "indexer_budget": 32,
                       "indexer_compress_ratio": 4},  # fmt: skip
    # attn_layer_indices=None is all Mamba; Bamba-9B has attention at [9, 18, 27] of 32
    "bamba": {"attn_layer_indices": [1], "mamba_n_heads": 8, "mamba_d_head": 16,
              "mamba_d_state": 16},  # fmt: skip
    # block_types cycle (recurrent, recurrent, attention): three layers reach the attention
    "recurrent_gemma": {"num_hidden_layers": 3, "lru_width": 64},
    # the default layers_block_type has 54 entries; mem-RoPE stays off as in the default
    "zamba2": {"num_hidden_layers": 2, "layers_block_type": ["linear_attention", "hybrid"],
               "n_mamba_heads": 2, "mamba_d_state": 16, "adapter_rank": 8},  # fmt: skip
    # layer_types=None is indexed; LFM2-8B-A1B-like: conv, conv, attention, 2 dense layers
    "lfm2_moe": {"num_hidden_layers": 3, "layer_types": ["conv", "conv", "full_attention"]},
    # DbrxAttention reads attn_config.rope_theta, which the default lacks (DBRX's own
    # config.json: 500000); n_heads/n_layers are DBRX's names for the head and layer counts
    "dbrx": {"n_heads": 4, "n_layers": 2, "max_seq_len": 64,
             "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
             "attn_config": {"kv_n_heads": 2, "rope_theta": 500000.0, "clip_qkv": 8},
             "ffn_config": {"ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2}},
    # n_shared_experts=None is multiplied (dots.llm1 has 2)
    "dots1": {"n_shared_experts": 2},
    # its validator allows top-1 routing only
    "zaya": {"num_experts_per_tok": 1},
    # index heads <= query heads per key head (the default's 12 of 48/4: all of them)
    "kolibri1_1": {"index_num_heads": 2},
    # rope_parameters={} by default, read per layer type: default RoPE on its full layers
    "cohere_compass_text": {"rope_parameters": {"full_attention": {
        "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]}}},
    # the per-layer-input table (262144 x layers x 256: 330M) shrunk to the tiny vocabulary
    "gemma3n_text": {**_GEMMA_PER_LAYER_INPUT, "laurel_rank": 8,
                     "activation_sparsity_pattern": [0.95] * 5},  # fmt: skip
    # + global (full) layers twice the sliding head_dim, as Gemma 4's 512 vs 256
    "gemma4_text": {**_GEMMA_PER_LAYER_INPUT, "per_layer_config": {"05": {"head_dim": 32}}},
    # head_dim 192 x partial 0.334 = a 64-d rotary slice in MiMo-V2-Flash: 24 x 0.334 = 8
    # keeps it even (16 x 0.334 = 5 is no RoPE a real model has); v_head_dim 128/192 of it
    "mimo_v2_flash": {"head_dim": 24, "v_head_dim": 16},
    # Phi-3.5-MoE's window is 131072 (no sliding within any text analysed), not TINY's 8
    "phimoe": {"sliding_window": 131072},
    # MLA in a GatedLinearAttention hybrid: the linear heads (32 x 128 by default) shrunk
    "bailing_hybrid": {"linear_num_heads": 4, "linear_head_dim": 16},
    # KV heads = query heads (its validator); sliding layers have half the heads, a wider
    # latent and nope slice, as the default's per_layer_config (64 of 128 heads, latent 1024
    # vs 512, nope 192 vs 128, head_dim = 192 + 64 = 256)
    "dots3_note_text": {"num_key_value_heads": 4, "head_dim": 24, "per_layer_config": {"02": {
        "num_attention_heads": 2, "num_key_value_heads": 2, "kv_lora_rank": 32,
        "qk_nope_head_dim": 16}}},
    # nGPT with loops: 4 layers (sliding x3, full), one input, two looped, one output layer
    "dory": {"num_hidden_layers": 4, "n_input_layers": 1, "n_output_layers": 1,
             "layer_types": ["sliding_attention"] * 3 + ["full_attention"]},
    # the vision (27 layers) and audio (24 blocks) towers of 870M shrunk to one layer each
    "phi4_multimodal": {
        "vision_config": {"hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 1,
                          "num_attention_heads": 4},
        "audio_config": {"hidden_size": 64, "intermediate_size": 64, "num_blocks": 1,
                         "num_attention_heads": 4, "ext_pw_out_channel": 64,
                         "depthwise_separable_out_channel": 64, "nemo_conv_channels": 64}},
    # four byte-level transformers (4.6B) and the 500002-row hash tables shrunk; no cache:
    # its DynamicCache(config=BltConfig) raises (BltConfig has no num_hidden_layers)
    "blt": {
        "encoder_hash_byte_group_vocab": 1024, "use_cache": False,
        "patcher_config": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "num_key_value_heads": 4, "head_dim": 16, "intermediate_size": 64},
        "encoder_config": {"hidden_size": 64, "hidden_size_global": 64, "num_hidden_layers": 1,
                           "num_attention_heads": 4, "num_key_value_heads": 4,
                           "intermediate_size": 64},
        "decoder_config": {"hidden_size": 64, "hidden_size_global": 64, "num_hidden_layers": 1,
                           "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16,
                           "intermediate_size": 64},
        "global_config": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                          "num_key_value_heads": 4, "head_dim": 16, "intermediate_size": 64}},
}  # fmt: skip


# The encoders issue 54 names, beside every masked-LM and text-encoder family the mappings
# list with RoPE in its config (encoder_families): name -> (model type, its tiny fields).
# Token ids of the byte tokenizer run to 259, so every vocabulary stays TINY's 256 + specials.
_T5GEMMA_HALF = {"hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                 "query_pre_attn_scalar": 16, "sliding_window": 4, "vocab_size": 256,
                 "layer_types": ["sliding_attention", "full_attention"]}  # fmt: skip
ENCODERS: dict[str, tuple[str, dict[str, Any]]] = {
    # ESM-2: rotary positions (absolute is the config's default), q scaled before RoPE
    "esm": ("esm", {"position_embedding_type": "rotary", "pad_token_id": 1,
                    "mask_token_id": 32, "token_dropout": False}),  # fmt: skip
    "esmc": ("esmc", {"num_key_value_heads": 4, "head_dim": 16}),
    # global layers every third, local layers |i - j| <= local_attention / 2
    "modernbert": ("modernbert", {"num_hidden_layers": 3, "local_attention": 8,
                                  "layer_types": ["full_attention", "sliding_attention",
                                                  "sliding_attention"],
                                  "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
                                  "cls_token_id": 1, "sep_token_id": 2}),  # fmt: skip
    "eurobert": ("eurobert", {"num_key_value_heads": 2, "head_dim": 16, "pad_token_id": 0,
                              "bos_token_id": 1, "eos_token_id": 2}),  # fmt: skip
    "gte": ("gte", {"pad_token_id": 1}),
    "nomic_bert": ("nomic_bert", {"head_dim": 16, "pad_token_id": 0}),
    "jina_embeddings_v3": ("jina_embeddings_v3", {"pad_token_id": 1, "bos_token_id": 0,
                                                  "eos_token_id": 2}),  # fmt: skip
    "ultrabert": ("ultrabert", {"num_hidden_layers": 3, "num_key_value_heads": 2,
                                "head_dim": 16, "sliding_window": 4, "prediction_head_size": 64,
                                "layer_types": ["sliding_attention", "sliding_attention",
                                                "full_attention"]}),  # fmt: skip
    # RoPE applied inside its own attention (a staticmethod), no attention interface
    "roformer": ("roformer", {"embedding_size": 64}),
    "embedding_gemma2_text": ("embedding_gemma2_text", {
        "num_hidden_layers": 2, "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention"], "hidden_size_per_layer_input": 16,
        "embedding_dim": 32, "global_head_dim": 32, "num_global_key_value_heads": 1}),
    # EmbeddingGemma v1: Gemma 3 with the flag that makes its attention look both ways
    "gemma3_text+bidirectional": ("gemma3_text", {
        "num_hidden_layers": 2, "num_key_value_heads": 2, "head_dim": 16,
        "query_pre_attn_scalar": 16, "sliding_window": 8,
        "layer_types": ["sliding_attention", "full_attention"],
        "use_bidirectional_attention": True, "use_cache": False}),
    "t5gemma_encoder": ("t5gemma", {"encoder": _T5GEMMA_HALF, "decoder": _T5GEMMA_HALF,
                                    "vocab_size": 256, "is_encoder_decoder": False}),
}  # fmt: skip
ENCODERS_ANALYSED = 10  # at least this many of the twelve named above (issue 54)


@dataclass(frozen=True)
class Family:
    model_type: str  # the family's name: its model type, or a named variant (ENCODERS)
    status: str  # "analysed" or "refused" ("traceback" fails the test)
    reason: str  # the refusal's line (measured numbers dropped), or the tolerances validated
    record: dict[str, Any] | None = field(default=None, compare=False, repr=False)  # analysed
    kind: str = "causal LM"  # the head transformers builds it with (kind_of)


# the residual each tolerance bounds: (JSON record key, the record's tolerance key, name)
RESIDUALS = (("reconstruction_max_abs_diff", "tolerance_probs", "probabilities"),
             ("logit_max_rel_diff", "tolerance_logit", "logits"),
             ("rope_max_rel_diff", "tolerance_rope", "RoPE"))  # fmt: skip


def tolerance_constants() -> dict[str, float]:
    """The float32 validation tolerances, by record key (the tiny models are float32)."""
    from ropesplit.empirical.model.validate import LOGIT_TOL, RECONSTRUCTION_TOL, ROPE_TOL

    return {"reconstruction_max_abs_diff": RECONSTRUCTION_TOL, "logit_max_rel_diff": LOGIT_TOL,
            "rope_max_rel_diff": ROPE_TOL}  # fmt: skip


def validated() -> str:
    """An analysed family's line in the table: the tolerances its residuals are within
    (``validated: probabilities <= 1e-04, logits <= 1e-05, RoPE <= 1e-05``), the same on
    every machine; the residuals themselves are in the family's record."""
    tol = tolerance_constants()
    return "validated: " + ", ".join(f"{name} <= {tol[key]:.0e}" for key, _, name in RESIDUALS)


# numbers a refusal's line measures (empirical/model/capture.py, validate.py, geometry.py,
# empirical/analysis/analyze.py), dropped so that the line is the same on every machine
MEASURED = (
    (r"relative error [^\s,]+, tolerance", "relative error over the tolerance"),
    (r"\b(\w+_diff) [^\s,]+ (exceeds|within)\b", r"\1 \2"),
    (r"\btightness_max [^\s,]+ exceeds", "tightness_max exceeds"),
    (r"fits no single frequency per pair \([^)]*\)", "fits no single frequency per pair"),
)


def stable(reason: str) -> str:
    """A refusal's line without the numbers it measured (:data:`MEASURED`)."""
    for pattern, replacement in MEASURED:
        reason = re.sub(pattern, replacement, reason)
    return reason


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


def tiny_config(model_type: str, **pattern: Any) -> Any:
    """The family's config with every field of :data:`TINY` it has set to the tiny shape, the
    prefix of its layer pattern, its :data:`OVERRIDES`, then ``pattern`` (a real layer pattern,
    tests/real_patterns.py)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    fields = cls().to_dict()
    kwargs = {name: value for name, value in TINY.items() if name in fields}
    patterns = {name: fields[name] for name in PATTERN_FIELDS if isinstance(fields.get(name), list)}
    if patterns:
        n = pattern_length(list(patterns.values()))
        kwargs.update({name: pattern[:n] for name, pattern in patterns.items()})
        kwargs["num_hidden_layers"] = n
    if "qk_rope_head_dim" in kwargs:  # multi-head latent attention, tied as its default ties
        if "head_dim" in kwargs and fields["head_dim"] == fields["qk_rope_head_dim"]:
            kwargs["head_dim"] = kwargs["qk_rope_head_dim"]  # the RoPE sub-head: the table's width
        if fields.get("num_key_value_heads") == fields.get("num_attention_heads"):
            kwargs["num_key_value_heads"] = kwargs["num_attention_heads"]  # one KV head per head
    kwargs.update(OVERRIDES.get(model_type, {}))
    kwargs.update(pattern)
    return cls(**kwargs)


def pattern_length(patterns: list[list[Any]]) -> int:
    """The layers of the shortest prefix holding every kind of layer the per-layer lists
    name together, and at least :data:`TINY`'s: a hybrid keeps a softmax layer, a NoPE
    pattern its NoPE layer, a sliding pattern its full layer."""
    kinds = list(zip(*patterns, strict=True))
    n = next(n for n in range(1, len(kinds) + 1) if set(kinds[:n]) == set(kinds))
    return max(n, TINY["num_hidden_layers"])


def kind_of(model_type: str, **fields: Any) -> str:
    """What transformers builds the family as (``loading.model_class``): ``causal LM``,
    ``masked LM``, ``text encoder`` or ``base model``."""
    from transformers.models.auto import modeling_auto as auto

    from ropesplit.empirical.model.loading import model_class

    kinds = {"AutoModelForCausalLM": "causal LM", "AutoModelForMaskedLM": "masked LM",
             "AutoModelForTextEncoding": "text encoder"}  # fmt: skip
    try:
        return kinds.get(model_class(tiny_config(model_type, **fields)).__name__, "base model")
    except Exception:  # no tiny config: refused when built, counted by its mapping's name
        for mapping, kind in ((auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "causal LM"),
                              (auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES, "masked LM"),
                              (auto.MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES, "text encoder")):
            if model_type in mapping:
                return kind
        return "base model"


def build(model_type: str, folder: Path, **fields: Any) -> str | None:
    """A tiny random-init model of the family saved in ``folder``; the reason if not."""
    import torch
    from conftest import byte_tokenizer

    from ropesplit.empirical.model.loading import model_class

    try:
        config = tiny_config(model_type, **fields)
        auto = model_class(config)
        with torch.device("meta"):
            size = sum(p.numel() for p in auto.from_config(config).parameters())
        if size > MAX_PARAMETERS:
            return f"the tiny config keeps {size / 1e6:.0f}M parameters (not built)"
        torch.manual_seed(0)
        auto.from_config(config).save_pretrained(folder)
    except Exception as exc:  # transformers refuses the tiny shape itself
        return f"transformers cannot build a tiny {model_type}: {one_line(exc)}"
    byte_tokenizer().save_pretrained(folder)
    return None


def analyse(model_type: str, root: Path, name: str | None = None, **fields: Any) -> Family:
    """``ropesplit analyze`` on the family's tiny model (``fields`` set on its config, saved
    under ``name``): analysed or refused, with why; the JSON record when analysed."""
    from ropesplit.cli import main

    name = name or model_type
    folder, text, record = root / name, root / "text.txt", root / f"{name}.json"
    text.write_text(TEXT)
    with _quiet():
        reason = build(model_type, folder, **fields)
    if reason is not None:
        return Family(name, "refused", reason, kind=kind_of(model_type, **fields))
    err = io.StringIO()
    with _quiet(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(["analyze", "--model", str(folder), "--text", str(text), "--tokens",
                         str(TOKENS), "--no-control", "--json", str(record)])  # fmt: skip
        except Exception as exc:  # what a user would see as a traceback
            return Family(name, "traceback", f"{type(exc).__name__}: {one_line(exc)}")
    lines = [line for line in err.getvalue().splitlines() if "error:" in line]
    kind = kind_of(model_type, **fields)
    if code == 0:
        return Family(name, "analysed", validated(), json.loads(record.read_text()), kind)
    assert "Traceback" not in err.getvalue(), (model_type, err.getvalue())
    assert len(lines) == 1, (model_type, err.getvalue())
    reason = lines[0].split("error: ", 1)[1]
    return Family(name, "refused", stable(re.sub(r"/\S*/" + re.escape(name), name, reason)),
                  kind=kind)


def run_all(root: Path | None = None) -> list[Family]:
    with contextlib.ExitStack() as stack:
        base = Path(root) if root else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        return [analyse(model_type, base) for model_type in rope_families()]


def encoder_families() -> dict[str, tuple[str, dict[str, Any]]]:
    """:data:`ENCODERS`, and every other masked-LM or text-encoder family (not a causal LM)
    whose own config states RoPE, with no fields of its own: name -> (type, fields)."""
    from transformers.models.auto import modeling_auto as auto

    named = {model_type for model_type, _ in ENCODERS.values()}
    listed = {*auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES, *auto.MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES}
    found = _with_rope(listed - set(auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) - named)
    return {**ENCODERS, **{model_type: (model_type, {}) for model_type in found}}


def base_only() -> list[str]:
    """The RoPE model types transformers builds only as a base model (in no causal-LM,
    masked-LM or text-encoding mapping) and not named in :data:`ENCODERS`: vision towers,
    audio encoders and codecs, the text parts of multimodal decoders."""
    from transformers.models.auto import modeling_auto as auto

    headed = {*auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, *auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
              *auto.MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES,
              *(model_type for model_type, _ in ENCODERS.values())}  # fmt: skip
    return _with_rope(set(auto.MODEL_MAPPING_NAMES) - headed)


def _with_rope(model_types: set[str]) -> list[str]:
    """Those of ``model_types`` whose default config states RoPE, sorted (a config that
    cannot be made is counted nowhere)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from ropesplit.empirical.adapter import carries_rope

    out = []
    with _quiet():
        for model_type in sorted(model_types):
            try:
                rope = carries_rope(CONFIG_MAPPING[model_type]())
            except Exception:  # transformers raises many types
                continue
            if rope:
                out.append(model_type)
    return out


def run_encoders(root: Path | None = None) -> list[Family]:
    with contextlib.ExitStack() as stack:
        base = Path(root) if root else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        return [analyse(model_type, base, name, **fields)
                for name, (model_type, fields) in encoder_families().items()]  # fmt: skip


def encoder_table(families: list[Family]) -> str:
    """The encoders' Markdown table: the count per kind, then family, kind, status, reason."""
    import transformers

    rows = sorted(families, key=lambda f: (f.status != "analysed", f.kind, f.model_type))
    kinds: dict[str, list[int]] = {}
    for f in families:
        kinds.setdefault(f.kind, [0, 0])[f.status == "analysed"] += 1
    counts = "; ".join(f"{kind}: {done} of {done + refused} analysed"
                       for kind, (refused, done) in sorted(kinds.items()))  # fmt: skip
    rest = base_only()
    lines = [f"transformers {transformers.__version__}: {len(families)} RoPE families that "
             f"attend both ways or carry no LM head ({counts}). Beyond these, {len(rest)} RoPE "
             "model types are built only as a base model (vision towers, audio encoders and "
             "codecs, the text parts of multimodal decoders: positions on several axes) and "
             "are not measured here.", "",
             "| family | kind | status | reason, or the tolerances validated |",
             "|---|---|---|---|"]  # fmt: skip
    lines += [f"| `{f.model_type}` | {f.kind} | {f.status} | {f.reason.replace('|', '/')} |"
              for f in rows]  # fmt: skip
    return "\n".join(lines)


def table(families: list[Family]) -> str:
    """The Markdown table of the docs: family, status, reason; analysed first."""
    import transformers

    rows = sorted(families, key=lambda f: (f.status != "analysed", f.model_type))
    done = sum(f.status == "analysed" for f in families)
    lines = [f"transformers {transformers.__version__}: {len(families)} RoPE causal-LM "
             f"families, {done} analysed, {len(families) - done} refused.", "",
             "| family | status | reason, or the tolerances validated |",
             "|---|---|---|"]  # fmt: skip
    lines += [f"| `{f.model_type}` | {f.status} | {f.reason.replace('|', '/')} |" for f in rows]
    return "\n".join(lines)


ENCODERS_START, ENCODERS_END = "<!-- encoders:start -->", "<!-- encoders:end -->"


def from_documented_release() -> None:
    """Skip on a transformers older than the docs table's (older releases attend in private
    methods, or fail inside their own tiny models, before ropesplit is reached)."""
    import pytest
    import transformers

    documented = documented_release()
    installed = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    if installed < tuple(int(x) for x in documented.split(".")[:2]):
        pytest.skip(f"promised from transformers {documented} on")


def documented_release() -> str:
    """The transformers release the docs table is for (``"5.25.0"``)."""
    return documented().split(":")[0].removeprefix("transformers ")


def documented(start: str = START, end: str = END) -> str:
    """The table between the markers ``start`` and ``end`` of docs/analyse-your-model.md."""
    text = DOC.read_text(encoding="utf-8")
    return text.split(start, 1)[1].split(end, 1)[0].strip()


def write_doc(table_text: str, start: str = START, end: str = END) -> None:
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(start, 1)
    DOC.write_text(f"{head}{start}\n{table_text}\n{end}{rest.split(end, 1)[1]}",
                   encoding="utf-8")  # fmt: skip


if __name__ == "__main__":  # python tests/families.py [encoders]
    sys.path.insert(0, str(Path(__file__).parent))
    if sys.argv[1:] == ["encoders"]:
        write_doc(encoder_table(run_encoders()), ENCODERS_START, ENCODERS_END)
        print(documented(ENCODERS_START, ENCODERS_END))
    else:
        write_doc(table(run_all()))
        print(documented())
