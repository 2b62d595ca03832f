"""The capture under any attention kernel: the model as it runs (docs/architecture.md).

Eager attention hands the capture its logits and probabilities; SDPA (and flash
attention) form neither, so the capture is held to the kernel's output ``A V``. The
kernel contract: statistics of float32 activations agree to 1e-5 relative across a
change of kernel, and counts and text are identical. A kernel that attends otherwise than
the capture rebuilds fails the validation; a kernel no registry holds is one line.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import transformers as T
from conftest import TEXT, TINY, llama_config, save_model

from ropesplit.cli import main
from ropesplit.core.errors import RopesplitError, ValidationError
from ropesplit.empirical.model.capture import capture
from ropesplit.empirical.model.loading import Placement, load_model

KERNEL_REL = 1e-5  # the contract: float32 statistics across a change of kernel
# a statistic near 0 (a mean of centred logits, a remainder of 0) is compared absolutely at
# this level instead
FLOOR = 1e-6
# an order statistic (a median over pairs) moves by the gap to its neighbour
ORDER_REL = 1e-4
ORDER_STATISTICS = ("tightness_median",)
# the record's fields that say how it was made, not what it measured
HOW = {"seconds", "attention", "reconstruction_max_abs_diff", "logit_max_rel_diff",
       "logit_max_abs_diff", "logit_scale", "rope_max_rel_diff", "output_max_rel_diff"}


def _tiny(name):
    import families

    if name == "llama":  # grouped queries: two query heads read each key head
        return llama_config(**TINY)
    model_type, fields = families.ENCODERS[name]
    return families.tiny_config(model_type, **fields)


def _differences(a, b, path=""):
    """Every place two records differ beyond the kernel contract."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        return [d for k in a if k not in HOW for d in _differences(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list):
        assert len(a) == len(b), path
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in _differences(x, y, f"{path}[{i}]")]  # fmt: skip
    if isinstance(a, float) and not isinstance(b, bool):
        name = path.rsplit("/", 1)[-1]
        # a log ratio's difference is the ratio's relative difference
        floor = KERNEL_REL if "log_" in name else FLOOR
        rel = ORDER_REL if name in ORDER_STATISTICS else KERNEL_REL
        same = (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rel,
                                                                  abs_tol=floor)
        return [] if same else [f"{path}: {a!r} vs {b!r}"]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


@pytest.mark.parametrize("name", ["llama", "esm", "modernbert"])
def test_sdpa_and_eager_give_one_record(tmp_path, name):
    """A decoder with grouped queries, an encoder both ways and one with local layers (a
    window either side), analysed with their trained-here twin's control under eager and
    SDPA: every statistic within the kernel contract, every count and text identical; the
    eager run compared logits and probabilities, the SDPA run the output. The encoders from
    the docs table's release on (older ones rotate in methods of their own)."""
    if name != "llama":
        import families

        families.from_documented_release()
    folder = save_model(tmp_path / name, _tiny(name))
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    records = {}
    for kernel in ("eager", "sdpa"):
        path = tmp_path / f"{kernel}.json"
        assert main(["analyze", "--model", folder, "--text", str(text), "--tokens", "24",
                     "--attention", kernel, "--json", str(path)]) == 0  # fmt: skip
        records[kernel] = json.loads(path.read_text())
    eager, sdpa = records["eager"], records["sdpa"]
    assert eager["attention"] == "eager" and sdpa["attention"] == "sdpa"
    # not measured is NaN, written null
    assert eager["reconstruction_max_abs_diff"] < 1e-6 and eager["output_max_rel_diff"] is None
    assert sdpa["output_max_rel_diff"] < 1e-6 and sdpa["reconstruction_max_abs_diff"] is None
    assert _differences(eager, sdpa) == []


def _doubled_scale(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """SDPA at twice the module's scale: a kernel that attends otherwise than its inputs say."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask,
                                  scaling=2 * (scaling or query.shape[-1] ** -0.5), **kwargs)


def test_a_kernel_that_attends_otherwise_fails_the_validation():
    """The output check is what catches a kernel the rebuild does not reproduce (no logits
    or probabilities are there to compare): a planted kernel at twice the scale fails it,
    SDPA itself passes on the same model."""
    T.AttentionInterface.register("doubled_scale", _doubled_scale)
    T.masking_utils.AttentionMaskInterface.register("doubled_scale",
                                                    T.masking_utils.sdpa_mask)  # fmt: skip
    ids = torch.arange(20) % 50 + 3
    assert capture(load_model(llama_config(**TINY), placement=Placement(attention="sdpa")),
                   ids).output_max_rel_diff < 1e-6  # fmt: skip
    planted = load_model(llama_config(**TINY), placement=Placement(attention="doubled_scale"))
    with pytest.raises(ValidationError, match="output_max_rel_diff .* exceeds"):
        capture(planted, ids)


def test_a_kernel_no_registry_holds_is_one_line():
    with pytest.raises(RopesplitError, match="sdpx") as err:
        load_model(llama_config(**TINY), placement=Placement(attention="sdpx"))
    assert "\n" not in str(err.value)


def test_the_model_s_own_kernel_is_the_config_s():
    """``--attention model`` leaves the kernel the config selects (SDPA for Llama here), and
    the capture runs it."""
    loaded = load_model(llama_config(**TINY), placement=Placement(attention="model"))
    assert loaded.config._attn_implementation == "sdpa"
    assert capture(loaded, torch.arange(12) + 3).attention == "sdpa"
