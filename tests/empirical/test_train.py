"""``ropesplit train``: determinism, resume, atomic checkpoints, analyze round trip.

A tiny config (1 layer, d_model 16, 2 heads, L_train 16, 4 steps) keeps each
training to a second or two; the statistics are whatever the numerics give,
the tests only ask that runs which should agree do, bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ropesplit.cli import main
from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.model.loading import load_model
from ropesplit.empirical.training.emergence import (
    prediction,
    run_emergence,
    step0_vs_control,
    verdict,
)
from ropesplit.empirical.training.train import (
    BOS,
    TrainConfig,
    byte_tokenizer,
    checkpoint_steps,
    checkpoints,
    model_config,
    split_text,
    torch_threads,
    train,
)
from ropesplit.empirical.training.train_measure import Measurer, held_out_ids, measure_loaded

pytestmark = pytest.mark.slow  # training (make test-fast leaves it out)

TINY = dict(steps=4, seq_len=16, layers=1, d_model=16, heads=2, d_ff=16, batch=2, warmup=1,
            checkpoints=4, val_windows=2, n_boot=50, threads=1)  # fmt: skip
TIMING = ("seconds_measure", "seconds_train")


def tiny(out: Path, **changes) -> TrainConfig:
    return TrainConfig(out=str(out), **(TINY | changes))


def strip(records: list[dict]) -> list[dict]:
    """The records without wall-clock fields (everything else must be reproducible)."""
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted tiny run."""
    out = tmp_path_factory.mktemp("train") / "ref"
    return out, train(tiny(out), progress=False)


def test_checkpoint_steps_are_log_spaced_from_init_to_last() -> None:
    assert checkpoint_steps(100, 5) == [0, 1, 5, 22, 100]
    assert checkpoint_steps(4, 4) == [0, 1, 2, 4]
    assert checkpoint_steps(1, 8) == [0, 1]


def test_tokenizer_is_bytes_with_bos_and_loads_back(tmp_path) -> None:
    from transformers import AutoTokenizer

    text = "RoPE: é ∑\n"
    byte_tokenizer().save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    ids = tok(text)["input_ids"]
    assert ids == [BOS, *text.encode("utf-8")]
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_reference_run_writes_complete_checkpoints(reference) -> None:
    out, records = reference
    assert [r["step"] for r in records] == checkpoint_steps(4, 4)
    folders = checkpoints(out)
    assert [p.name for p in folders] == [f"step-{s:06d}" for s in checkpoint_steps(4, 4)]
    for folder in folders:
        assert {"config.json", "model.safetensors", "tokenizer.json", "trainer_state.pt",
                "metrics.json"} <= {p.name for p in folder.iterdir()}  # fmt: skip
    assert not list(out.glob(".tmp-*"))
    assert records[-1]["val_loss"] < records[0]["val_loss"]  # 4 steps already learn something
    summary = records[0]["summary"]["r_split"]
    assert summary["low"] <= summary["mean"] <= summary["high"] and summary["n"] == 2


def test_same_seed_and_threads_give_the_same_metrics(reference, tmp_path) -> None:
    assert strip(train(tiny(tmp_path / "again"), progress=False)) == strip(reference[1])


def test_another_seed_gives_other_weights(reference, tmp_path) -> None:
    other = train(tiny(tmp_path / "other", seed=1), progress=False)
    assert other[0]["val_loss"] != reference[1][0]["val_loss"]


def test_resume_after_interruption_equals_uninterrupted(reference, tmp_path) -> None:
    from safetensors.numpy import load_file

    out = tmp_path / "resumed"
    first = train(tiny(out), progress=False, stop_after=2)
    assert [r["step"] for r in first] == [0, 1, 2]
    resumed = train(tiny(out), progress=False)
    assert strip(resumed) == strip(reference[1])
    a = load_file(out / "step-000004" / "model.safetensors")
    b = load_file(reference[0] / "step-000004" / "model.safetensors")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_a_write_killed_midway_leaves_no_half_checkpoint(reference, tmp_path) -> None:
    """The measurement raises after the weights were saved: no step-2 folder, then resume."""
    out = tmp_path / "crash"
    real = Measurer(tiny(out))

    def crash_at_2(folder, step):
        if step == 2:
            assert (folder / "model.safetensors").is_file()  # the weights were half way in
            raise KeyboardInterrupt
        return real(folder, step)

    with pytest.raises(KeyboardInterrupt):
        train(tiny(out), progress=False, measure=crash_at_2)
    assert [p.name for p in checkpoints(out)] == ["step-000000", "step-000001"]
    assert not (out / "step-000002").exists() and (out / ".tmp-step-000002").is_dir()
    assert strip(train(tiny(out), progress=False)) == strip(reference[1])
    assert not list(out.glob(".tmp-*"))


def test_a_killed_process_leaves_only_complete_checkpoints(tmp_path) -> None:
    """SIGKILL while a checkpoint is being measured: every step-* folder is complete and loads."""
    out = tmp_path / "killed"
    script = (
        "import sys, time\n"
        "from ropesplit.empirical.training import train as T, train_measure as M\n"
        "real = M.Measurer.__call__\n"
        "def slow(self, folder, step):\n"
        "    if step == 2: time.sleep(60)\n"
        "    return real(self, folder, step)\n"
        "M.Measurer.__call__ = slow\n"
        f"T.train(T.TrainConfig(out={str(out)!r}, **{TINY!r}), progress=False)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (out / ".tmp-step-000002" / "model.safetensors").exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert [p.name for p in checkpoints(out)] == ["step-000000", "step-000001"]
    assert sorted(p.name for p in out.glob("step-*")) == ["step-000000", "step-000001"]
    loaded = load_model(str(out / "step-000001"))
    assert loaded.n_layers == 1


def test_changed_config_refuses_to_resume(reference, tmp_path) -> None:
    out = tmp_path / "cfg"
    train(tiny(out, steps=1, checkpoints=2), progress=False)
    with pytest.raises(RopesplitError, match=r"^run folder .* holds a run with another config"):
        train(tiny(out, steps=2, checkpoints=2), progress=False)


def test_step_zero_is_the_random_init_of_the_config(reference) -> None:
    """Known truth: step 0 measures exactly what load_model(config, seed) builds."""
    cfg = tiny(reference[0])
    with torch_threads(1):  # as train measures
        direct = measure_loaded(load_model(model_config(cfg), seed=cfg.seed), held_out_ids(cfg),
                                n_boot=cfg.n_boot, seed=cfg.seed)  # fmt: skip
    step0 = reference[1][0]
    assert direct["val_loss"] == step0["val_loss"]
    assert [h["r_split"] for h in direct["heads"]] == [h["r_split"] for h in step0["heads"]]


def test_checkpoint_round_trips_through_analyze(reference, tmp_path, capsys) -> None:
    """``ropesplit analyze --model CKPT`` on the held-out window: the recorded per-head values."""
    out, records = reference
    cfg = tiny(out)
    _, held = split_text(cfg)
    text = tmp_path / "held.txt"
    text.write_text(held[: 4 * cfg.seq_len], encoding="utf-8")
    js = tmp_path / "a.json"
    code = main(["analyze", "--model", str(out / "step-000004"), "--text", str(text),
                 "--tokens", str(cfg.seq_len), "--json", str(js), "--no-control"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert json.loads(js.read_text())["token_ids"] == held_out_ids(cfg)[0].tolist()
    # the record: each head's mean over every held-out window, kbar without BOS
    from ropesplit.empirical import analyze, load_model
    from ropesplit.empirical.analysis.analyze import DEFAULT_MEASURE

    loaded = load_model(str(out / "step-000004"))
    measure = dataclasses.replace(DEFAULT_MEASURE, kbar_rule="mean-skip-first", pair_budget=None)
    runs = [analyze(loaded, w, measure=measure).heads for w in held_out_ids(cfg)]
    assert records[-1]["heads"][0]["windows"] == len(runs) == cfg.val_windows
    for h, want in enumerate(records[-1]["heads"]):
        for name in ("r_split", "remainder_share", "tightness_max", "lowfreq_share_k"):
            got = np.mean([run[h][name] for run in runs])
            assert got == pytest.approx(want[name], rel=1e-12, nan_ok=True)


def test_energy_per_head_sums_to_the_layer_energy(reference) -> None:
    record = reference[1][-1]
    per_head = np.array([h["energy_k"] for h in record["heads"]]).sum(0)  # 2 heads, 2 KV heads
    assert np.allclose(per_head, record["energy_k"][0], rtol=1e-12)


def test_prediction_counts_slow_pairs_before_training() -> None:
    cfg = TrainConfig(seq_len=128, d_model=128, heads=4)  # head_dim 32: 16 pairs
    pred = prediction(cfg, [10000.0, 100.0])
    assert [b["slow_pairs"] for b in pred["bases"]] == [7, 0]
    assert pred["many"] == 10000.0 and pred["few"] == 100.0
    assert "leaves 7 of 16 pairs slow" in pred["statement"]
    with pytest.raises(RopesplitError, match="^bases must differ in slow pairs"):
        prediction(cfg, [10000.0, 12000.0])


def _fake_run(base: float, start: float, end: float, seed: int = 0, heads: int = 16) -> dict:
    """A run whose heads move from ``start`` to ``end`` (+ small per-head and per-seed spread)."""
    spread = np.linspace(-0.01, 0.01, heads) + 0.01 * seed

    def ck(v):
        return {"heads": [{"r_split": v + s, "remainder_share": 1 - v + s,
                           "lowfreq_share_k": v + s} for s in spread]}  # fmt: skip

    return {"rope_base": base, "seed": seed, "checkpoints": [ck(start), ck(end + 0.003 * seed)]}


@pytest.mark.parametrize(
    ("many_end", "few_end", "seeds", "word"),
    [(0.9, 0.6, 3, "agrees"), (0.6, 0.9, 3, "disagrees"), (0.7, 0.7, 3, "inconclusive"),
     (0.9, 0.6, 1, "inconclusive")],  # one seed: no interval over training runs
)  # fmt: skip
def test_verdict_follows_the_numbers_with_seeds_as_units(many_end, few_end, seeds, word) -> None:
    runs = [_fake_run(10000.0, 0.5, many_end + 0.01 * (s == 1), s) for s in range(seeds)]
    runs += [_fake_run(100.0, 0.5, few_end, s) for s in range(seeds)]
    out = verdict(runs, {"many": 10000.0, "few": 100.0}, n_boot=200, seed=0)
    assert {v["verdict"] for v in out.values()} == {word}
    assert all(v["seeds"] == seeds for v in out.values())


def test_step0_vs_control_overlap_is_computed() -> None:
    def rec(mean, low, high):
        return {"summary": {n: {"mean": mean, "low": low, "high": high} for n in
                            ("r_split", "remainder_share", "tightness_max", "lowfreq_share_k",
                             "lowfreq_share_q")}}  # fmt: skip

    near = step0_vs_control(rec(0.5, 0.4, 0.6), rec(0.55, 0.5, 0.7))
    apart = step0_vs_control(rec(0.5, 0.4, 0.45), rec(0.55, 0.5, 0.7))
    assert all(v["overlap"] for v in near.values())
    assert not any(v["overlap"] for v in apart.values())


def test_two_bases_end_to_end(tmp_path, capsys) -> None:
    """The CLI prints the prediction before the tables and a verdict after; JSON."""
    js = tmp_path / "t.json"
    argv = ["train", "--out", str(tmp_path / "runs"), "--bases", "10000,100", "--steps", "2",
            "--seq-len", "16", "--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "16",
            "--batch", "2", "--checkpoints", "2", "--n-boot", "50", "--threads", "1",
            "--json", str(js), "--figures", str(tmp_path / "figs")]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.index("PREDICTION") < out.index("base 10000, seed 0")
    assert "->" in out.rsplit("PREDICTION", 1)[1]
    record = json.loads(js.read_text())
    assert [r["rope_base"] for r in record["runs"]] == [10000.0, 100.0]
    assert [c["step"] for c in record["runs"][0]["checkpoints"]] == [0, 1, 2]
    assert set(record["verdict"]) == {"r_split_change", "remainder_share_change",
                                      "lowfreq_share_k_change"}  # fmt: skip
    names = {p.name for p in (tmp_path / "figs").iterdir()}
    assert "fig11-emergence-double.png" in names and "fig12-emergence_pairs-single.pdf" in names


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bases", "ten"], "argument --bases: each value must be a number, got 'ten'"),
        (["--seeds", "0,x"], "argument --seeds: each value must be an integer, got 'x'"),
        (["--seeds=-1"], "argument --seeds: each value must be at least 0, got -1"),
        (["--steps", "0"], "argument --steps: must be at least 1, got 0"),
        (["--heads", "3"], "d_model / heads must be an even integer, got 128/3"),
        (["--bases", "1"], "rope_base must be a finite number above 1, got 1.0"),
        (["--bases", "100,100"], "argument --bases: repeats 100 in '100,100'"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, message, tmp_path, capsys) -> None:
    try:
        code = main(["train", "--out", str(tmp_path / "x"), *argv])
    except SystemExit as exc:  # the CLI's central checks fail while parsing
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and f"ropesplit train: error: {message}" in err and "Traceback" not in err


def test_run_emergence_single_run_uses_out_itself(tmp_path) -> None:
    cfg = tiny(tmp_path / "one", steps=1, checkpoints=2)
    record = run_emergence(cfg, [10000.0], [0], progress=False, say=lambda _: None)
    assert record["runs"][0]["out"] == cfg.out and "verdict" not in record
    assert (Path(cfg.out) / "step-000001").is_dir()
    assert dataclasses.asdict(cfg) == record["config"]


def test_remeasure_rewrites_only_the_metrics(reference, tmp_path) -> None:
    """A changed measure replaces metrics.json (seconds_train kept); the real one restores it."""
    import shutil

    from ropesplit.empirical.training.train import remeasure

    out = tmp_path / "copy"
    shutil.copytree(reference[0], out)
    weights = (out / "step-000004" / "model.safetensors").read_bytes()
    fake = remeasure(tiny(out), measure=lambda folder, step: {"step": step, "val_loss": -1.0})
    assert [r["val_loss"] for r in fake] == [-1.0] * 4
    assert [r["seconds_train"] for r in fake] == [r["seconds_train"] for r in reference[1]]
    assert json.loads((out / "step-000002" / "metrics.json").read_text())["val_loss"] == -1.0
    assert strip(remeasure(tiny(out))) == strip(reference[1])
    assert (out / "step-000004" / "model.safetensors").read_bytes() == weights


def test_recall_task_trains_resumes_and_prints_within_100_columns(tmp_path, capsys) -> None:
    """``--task recall`` trains (one label per answer), measures accuracy, the retrieval
    head and the weighted slow share, judges over seeds, and a rerun resumes to the same."""
    js = tmp_path / "r.json"
    argv = ["train", "--task", "recall", "--out", str(tmp_path / "runs"), "--bases", "10000,100",
            "--seeds", "0,1,2", "--steps", "2", "--seq-len", "52", "--layers", "1", "--d-model",
            "16", "--heads", "2", "--d-ff", "16", "--batch", "2", "--checkpoints", "2",
            "--n-boot", "20", "--threads", "1", "--vocab", "24", "--json", str(js)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 100 for line in out.splitlines())
    assert out.index("PREDICTION") < out.index("base 10000, seed 0")
    record = json.loads(js.read_text())
    assert set(record["verdict"]) == {"weighted_slow_share_rises", "r_split_rises",
                                      "accuracy_falls_with_distance"}  # fmt: skip
    assert all(v["seeds"] == 3 for v in record["verdict"].values())
    last = record["runs"][0]["checkpoints"][-1]
    assert 0 <= last["accuracy"] <= 1 and len(last["accuracy_by_distance"]) == 4
    assert {"layer", "head", "retrieval", "weighted_slow_share"} <= set(last["retrieval_head"])
    first = json.loads(js.read_text())
    assert main(argv) == 0  # every checkpoint there: resumed, nothing trained again
    assert json.loads(js.read_text())["runs"][0]["checkpoints"] == first["runs"][0]["checkpoints"]


def test_metrics_are_written_by_ropesplit_io_nan_as_null_and_read_back(tmp_path) -> None:
    """Every metrics.json is strict JSON (ropesplit.core.io: NaN -> null); a fresh run returns the
    records as written, so a resumed run reads back exactly the same."""
    def measure(folder, step):
        return {"step": step, "val_loss": float("nan") if step == 0 else 1.0,
                "heads": [{"r_split": float("nan"), "energy_k": np.ones(2)}]}  # fmt: skip

    cfg = tiny(tmp_path / "nan", steps=2, checkpoints=2)
    first = train(cfg, measure=measure, progress=False, stop_after=0)
    assert [r["step"] for r in first] == [0]
    for name in ("step-000000/metrics.json", "run.json"):
        text = (tmp_path / "nan" / name).read_text()
        json.loads(text, parse_constant=lambda c, name=name: pytest.fail(f"{name} holds {c}"))
    assert first[0]["val_loss"] is None and first[0]["heads"][0]["r_split"] is None
    assert first[0]["heads"][0]["energy_k"] == [1.0, 1.0]  # arrays as lists, as read back
    resumed = train(cfg, measure=measure, progress=False)
    assert [r["step"] for r in resumed] == [0, 1, 2] and resumed[0] == first[0]
    assert json.loads((tmp_path / "nan" / "run.json").read_text()) == json.loads(
        json.dumps(cfg.to_dict()))


def test_verdict_reads_null_statistics_as_undefined_heads() -> None:
    """A head whose r_split is null in the JSON (NaN when measured) counts as undefined: the
    r_split verdict is the one without that head, the other statistics' are untouched."""
    runs = [_fake_run(b, 0.5, end, s) for b, end in ((10000.0, 0.9), (100.0, 0.6))
            for s in range(3)]  # fmt: skip
    with_null, without = json.loads(json.dumps(runs)), json.loads(json.dumps(runs))
    for run_null, run_without in zip(with_null, without, strict=True):
        for ck_null, ck_without in zip(run_null["checkpoints"], run_without["checkpoints"],
                                       strict=True):  # fmt: skip
            ck_null["heads"][0]["r_split"] = None
            del ck_without["heads"][0]
    pred = {"many": 10000.0, "few": 100.0}
    got = verdict(with_null, pred, n_boot=200, seed=0)
    dropped = verdict(without, pred, n_boot=200, seed=0)["r_split_change"]
    full = verdict(runs, pred, n_boot=200, seed=0)
    assert got["r_split_change"]["verdict"] == dropped["verdict"] == "agrees"
    for key in ("mean", "low", "high"):
        assert got["r_split_change"][key] == pytest.approx(dropped[key], rel=1e-12)
        assert got["r_split_change"]["final_many"][key] == pytest.approx(
            dropped["final_many"][key], rel=1e-12)
    assert got["remainder_share_change"] == full["remainder_share_change"]


def test_recall_reruns_bit_identical_and_a_killed_run_resumes_to_the_same(tmp_path) -> None:
    """The recall task is as reproducible as the byte model: the same seed gives the
    same metrics and weights, and a run stopped after its second checkpoint resumes to them."""
    from safetensors.numpy import load_file

    task = {"task": "recall", "seq_len": 52, "vocab": 24, "init_std": 0.1}
    whole = train(tiny(tmp_path / "whole", **task), progress=False)
    again = train(tiny(tmp_path / "again", **task), progress=False)
    assert strip(again) == strip(whole) and "accuracy" in whole[-1]
    out = tmp_path / "resumed"
    assert [r["step"] for r in train(tiny(out, **task), progress=False, stop_after=1)] == [0, 1]
    assert strip(train(tiny(out, **task), progress=False)) == strip(whole)
    a = load_file(out / "step-000004" / "model.safetensors")
    b = load_file(tmp_path / "whole" / "step-000004" / "model.safetensors")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_the_masked_objective_trains_an_encoder_measured_both_ways(tmp_path) -> None:
    """``task="mlm"``: a EuroBERT of the causal run's shape trains on masked bytes, resumes to
    the same records, and each checkpoint is measured on every pair of its windows (both
    ways: L x L), its loss the masked tokens' on the seeded held-out masks."""
    from ropesplit.empirical.model.passes import masked_token_loss
    from ropesplit.empirical.training.train_measure import masked_windows

    cfg = tiny(tmp_path / "mlm", task="mlm")
    records = train(cfg, progress=False)
    loaded = load_model(str(checkpoints(cfg.out)[-1]))
    assert type(loaded.model).__name__ == "EuroBertForMaskedLM"
    last = records[-1]
    assert {h["n_pairs"] for h in last["heads"]} == {cfg.seq_len**2}
    inputs, labels = masked_windows(cfg)
    assert (inputs == 258).sum() == (labels >= 0).sum() > 0
    want = np.mean([masked_token_loss(loaded, x, y) for x, y in zip(inputs, labels, strict=True)])
    assert last["val_loss"] == pytest.approx(want, rel=1e-9)
    again = train(dataclasses.replace(cfg, out=str(tmp_path / "again")), progress=False)
    assert strip(again) == strip(records)  # the same seed and threads: the same run
