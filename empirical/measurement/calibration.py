r"""The verdict machinery on models whose answer is known: random init (null) and planted.

A decision rule is trusted only once it is seen to say "agrees" rarely where
nothing was learned and usually where the split holds by construction:

- **null**: a model at random initialisation judged as if it were trained,
  beside random-init twins of its own architecture. Nothing in it is
  learned, so every claim's rate of "agrees" must stay at most 5% (the rule's
  level is 2.5%: ``ropesplit.claims.registry``); the rate is reported with its exact
  binomial interval (``numerics.intervals.binomial_interval``);
- **planted**: the same architecture with the keys' deviation planted in the
  slow pairs only (:func:`plant_lowfreq_keys`: the key projection's rows of the
  fast half of the pairs zeroed and a constant bias there, so every key is
  :math:`\bar k` in the fast pairs and ``E`` lives only where
  :math:`\theta_l \Delta` stays tiny), beside random-init twins: the split holds
  by construction, so claims 2-4 must agree in at least 80% of the runs;
- **planted twins**: a planted model beside planted twins: its level
  conditions hold, but it is no different from its twins, so claims 2-4 must
  not agree (at most 5%). A rule that accepts a claim on any one condition
  fails here and on the null (``tests/empirical/test_calibration.py``).

:func:`calibration` runs them on tiny models (and the embedded model's
architecture at random init) and returns every run's rows, so each rule can be
judged on the same measurements (:func:`agree_rates`). ``python -m
ropesplit.empirical.measurement.calibration`` prints the rates (``docs/calibration.md``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ropesplit.claims.registry import CLAIMS, CONTROL_SEEDS
from ropesplit.claims.verdicts import graded_verdict
from ropesplit.empirical.adapter.configs import rope_spec, vocab_size
from ropesplit.empirical.adapter.weights import key_projections
from ropesplit.empirical.model.loaded import LoadedModel
from ropesplit.empirical.model.loading import load_model

__all__ = ["ARMS", "agree_rates", "any_condition_verdict", "calibration", "plant_lowfreq_keys",
           "tiny_config"]

TOKENS = 48  # tokens per passage: one length (the grid's other axes still apply)
PASSAGES = 8  # the registry's minimum
ARMS = ("null", "planted", "planted twins")
# RoPE base of the planted models: their low-frequency half turns < 1e-4 rad a token
PLANTED_BASE = 1e9


def tiny_config(family: str = "llama", *, base: float = 10000.0, bias: bool = False) -> Any:
    """A tiny config of ``family`` (``"llama"`` or ``"qwen2"``): 2 layers, 4 query heads of
    dimension 16, 2 KV heads, a vocabulary of 128, RoPE base ``base``."""
    import transformers as T

    fields: dict[str, Any] = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=2, intermediate_size=64, vocab_size=128,
                  max_position_embeddings=256, rope_theta=base)  # fmt: skip
    if family == "llama":
        return T.LlamaConfig(**fields, attention_bias=bias)
    if family == "qwen2":
        return T.Qwen2Config(**fields)  # Qwen2's q, k and v carry a bias already
    raise ValueError(f"family must be llama or qwen2, got {family!r}")


def plant_lowfreq_keys(loaded: LoadedModel, seed: int) -> LoadedModel:
    """Every layer's keys made constant in the high-frequency half of the pairs (in place): the
    rows of ``k_proj`` for those coordinates zeroed, its bias there a seeded constant. The model
    needs a key bias (Qwen2, or Llama with ``attention_bias=True``)."""
    from ropesplit.numerics.rope import low_half

    spec = rope_spec(loaded.config)  # the config's RoPE, read where every reader reads it
    d, theta = spec.head_dim, spec.frequencies  # (d/2,)
    fast = np.flatnonzero(low_half(theta) == 0.0)  # the half that turns fastest
    rows = np.concatenate([fast, fast + d // 2])  # half layout: pair l is (l, l + d/2)
    rng = np.random.default_rng([seed, 30])
    with torch.no_grad():
        for proj in key_projections(loaded.model):
            if proj.bias is None:
                raise ValueError("plant_lowfreq_keys needs a key bias (attention_bias=True)")
            n_kv = proj.out_features // d
            for h in range(n_kv):
                idx = torch.as_tensor(h * d + rows)
                proj.weight[idx] = 0.0
                proj.bias[idx] = torch.as_tensor(rng.normal(size=rows.size), dtype=proj.bias.dtype)
    return loaded


def _passages(vocab: int, seed: int) -> Any:
    from ropesplit.empirical.model.corpus import PassageIds

    ids = torch.randint(0, vocab, (PASSAGES, TOKENS), generator=torch.Generator().manual_seed(seed))
    return PassageIds([f"p{k}" for k in range(PASSAGES)], ids, TOKENS, 0, f"seed {seed}")


def _run(model: LoadedModel, twins: dict[int, LoadedModel], seed: int) -> dict[str, Any]:
    from ropesplit.claims.records import ClaimsSettings
    from ropesplit.empirical.measurement.claims_run import run_claims

    settings = ClaimsSettings(tokens=TOKENS, grid_tokens=(TOKENS,), passages=PASSAGES,
                              order_passages=PASSAGES)  # fmt: skip
    return run_claims(model, settings, controls=twins,
                      passage_ids=_passages(vocab_size(model.config), seed))


def calibration(
    *,
    seeds: int = 20,
    planted: int = 10,
    embedded: int = 3,
    families: Sequence[str] = ("llama",),
    on_run: Callable[[str, int], Any] | None = None,
) -> list[dict[str, Any]]:
    """Every arm's runs: ``{"arm", "model", "seed", "record"}`` each, the record a
    ``run_claims`` record (its rows re-judge under any rule: :func:`agree_rates`).

    ``seeds`` random-init tiny models per family (null), ``embedded`` random inits of the
    embedded model's architecture (null; its config is read from the GGUF, no weights),
    ``planted`` planted tiny models per family beside random twins and as many beside
    planted twins.
    """
    out: list[dict[str, Any]] = []
    for family in families:
        cfg = tiny_config(family)
        twins = {s: load_model(cfg, seed=10_000 + s) for s in CONTROL_SEEDS}
        for k in range(seeds):
            out.append({"arm": "null", "model": family, "seed": k,
                        "record": _run(load_model(cfg, seed=k), twins, k)})  # fmt: skip
            if on_run:
                on_run("null", k)
        pcfg = tiny_config(family, base=PLANTED_BASE, bias=True)
        random_twins = {s: load_model(pcfg, seed=20_000 + s) for s in CONTROL_SEEDS}
        planted_twins = {s: plant_lowfreq_keys(load_model(pcfg, seed=30_000 + s), 30_000 + s)
                         for s in CONTROL_SEEDS}  # fmt: skip
        for k in range(planted):
            model = plant_lowfreq_keys(load_model(pcfg, seed=40_000 + k), k)
            for arm, mine in (("planted", random_twins), ("planted twins", planted_twins)):
                out.append({"arm": arm, "model": family, "seed": k,
                            "record": _run(model, mine, 40_000 + k)})  # fmt: skip
                if on_run:
                    on_run(arm, k)
    if embedded:
        from transformers import AutoConfig

        from ropesplit.empirical.model.loading import default_model_path

        folder, name = default_model_path()
        cfg = AutoConfig.from_pretrained(folder, gguf_file=name)
        twins = {s: load_model(cfg, seed=10_000 + s) for s in CONTROL_SEEDS}
        for k in range(embedded):
            out.append({"arm": "null", "model": "SmolLM2-135M architecture", "seed": k,
                        "record": _run(load_model(cfg, seed=k), twins, k)})  # fmt: skip
            if on_run:
                on_run("null", k)
    return out


def agree_rates(runs: Sequence[Mapping[str, Any]], rule: Any = None) -> dict[str, Any]:
    """Per arm and claim: how many runs read "agrees" under ``rule`` (default the registry's,
    ``verdicts.graded_verdict``), with the rate's exact 95% interval."""
    from ropesplit.claims.records import Header, judge_record
    from ropesplit.numerics.intervals import binomial_interval

    counts: dict[str, dict[int, list[bool]]] = {}
    for run in runs:
        record = run["record"]
        judged = judge_record(Header.from_dict(record["header"]), record["passages"],
                              record["order"], rule=rule)  # fmt: skip
        for claim in judged["claims"]:
            counts.setdefault(run["arm"], {}).setdefault(int(claim["claim"]), []).append(
                claim["verdict"] == "agrees")  # fmt: skip
    return {arm: {claim: binomial_interval(int(sum(v)), len(v)).as_dict()
                  for claim, v in sorted(by_claim.items())}
            for arm, by_claim in counts.items()}  # fmt: skip


def any_condition_verdict(conditions: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """A wrong rule, for the calibration tests to reject: "agrees" as soon as any one
    condition does (no intersection over the conditions)."""
    if any(c["outcome"] == "agrees" for c in conditions):
        return "agrees", "some condition holds"
    return graded_verdict(conditions)


def main(argv: Sequence[str] | None = None) -> int:
    """Print every arm's rate of "agrees" per claim (the numbers of docs/calibration.md)."""

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--planted", type=int, default=10)
    parser.add_argument("--embedded", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    runs = calibration(seeds=args.seeds, planted=args.planted, embedded=args.embedded,
                       families=("llama", "qwen2"))  # fmt: skip
    rates = {"registry": agree_rates(runs), "any condition": agree_rates(runs,
                                                                          any_condition_verdict)}
    for rule, arms in rates.items():
        for arm, by_claim in arms.items():
            cells = ", ".join(f"claim {c}: {r['k']}/{r['n']} = {r['rate']:.2f} "
                              f"[{r['low']:.2f}, {r['high']:.2f}]" for c, r in by_claim.items())
            print(f"{rule} | {arm} | {cells}")
    if args.json:
        from ropesplit.core.io import write_json

        write_json(args.json, {"rates": rates, "claims": [t.claim for t in CLAIMS]})
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
