"""Shared tiny models for the tests: built from a config at random init, no hub, no download."""

from __future__ import annotations

import pytest

TINY_VOCAB = 128  # vocabulary of every tiny model here
_MADE_CACHE: list[str] = []  # the GGUF cache this session made (pytest_configure)


def pytest_configure(config):
    """The de-quantised GGUF cache (``empirical.model.converted``) in a folder of this session,
    not the user's home, unless ``ROPESPLIT_CACHE`` names one; the CLI's child processes and
    pytest-xdist's workers inherit it. Each worker gets its share of the cores' threads."""
    import os
    import tempfile

    if "ROPESPLIT_CACHE" not in os.environ:
        _MADE_CACHE.append(tempfile.mkdtemp(prefix="ropesplit-cache-"))
        os.environ["ROPESPLIT_CACHE"] = _MADE_CACHE[0]
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:  # pytest-xdist's workers share the cores: none oversubscribes them
        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ.setdefault("NUMBA_NUM_THREADS", str(threads))
        import torch

        torch.set_num_threads(threads)


# the longest modules, longest first (each over 20 s of one core, `make test` on 2 cores):
# started first, none is left running alone at the end
LONGEST = ("empirical/test_calibration.py", "report/test_report.py", "empirical/test_converted.py",
           "figures/test_figures.py", "empirical/test_empirical_analyze.py",
           "empirical/test_train.py", "test_families.py", "docs/test_docs.py",
           "figures/test_figures_recorded.py", "theory/test_theory_steps.py")  # fmt: skip


def pytest_collection_modifyitems(config, items):
    """The longest modules (:data:`LONGEST`) run first, then the other modules holding a test
    marked slow, then the rest, each module's tests in their own order: pytest-xdist hands out
    whole modules in this order (``--dist loadscope --no-loadscope-reorder``), so the long
    ones start early and no worker is left running one alone at the end."""
    from pathlib import Path

    here = Path(__file__).parent
    slow = {item.path for item in items if item.get_closest_marker("slow")}

    def rank(item):
        name = item.path.relative_to(here).as_posix() if item.path.is_relative_to(here) else ""
        return LONGEST.index(name) if name in LONGEST else len(LONGEST) + (item.path not in slow)

    items.sort(key=rank)  # stable: each module's order kept


def pytest_unconfigure(config):
    import shutil

    for folder in _MADE_CACHE:
        shutil.rmtree(folder, ignore_errors=True)


def llama_config(**fields):
    """The one place the tests build a ``transformers.LlamaConfig``: ``fields`` as
    given, nothing else defaulted here, so each test states the shape it needs."""
    import transformers as T

    return T.LlamaConfig(**fields)


def tiny_llama(layers: int = 2, *, seed: int = 0, context: int = 256, heads: int = 4,
               kv_heads: int = 2, hidden: int = 64, **config):  # fmt: skip
    """A random-init Llama (``layers`` layers, ``heads`` query heads of dim ``hidden/heads``)
    loaded through ``ropesplit.empirical.load_model`` (eager attention, as every capture needs);
    ``config`` adds LlamaConfig fields (``attention_bias=True``, ...)."""
    from ropesplit.empirical import load_model

    config = llama_config(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        num_hidden_layers=layers,
        intermediate_size=64,
        vocab_size=TINY_VOCAB,
        max_position_embeddings=context,
        **config,
    )
    return load_model(config, seed=seed)


def shared_tmp(tmp_path_factory: pytest.TempPathFactory):
    """The run's temporary folder, the one every pytest-xdist worker sees (each worker's
    own folder is inside it)."""
    import os

    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


# test_converted's cache of the embedded GGUF (in shared_tmp), which the real-model analysis
# (test_empirical_analyze) reads once it is made: the GGUF de-quantised once less
SMOLLM2_CACHE = "smollm2-cache"


@pytest.fixture(scope="session")
def step_results(tmp_path_factory):
    """Every step's check (``theory.check_all``, about 15 s of sympy) once per run: the first
    pytest-xdist worker to need it runs it, the others wait for it and read its pickle from
    the run's shared temporary folder. The theory's tests assert each result; the CLI, record
    and report tests that run the checks again read these instead (:func:`shared_checks`)."""
    import pickle

    from filelock import FileLock

    from ropesplit.theory import check_all

    path = shared_tmp(tmp_path_factory) / "step-results.pickle"
    with FileLock(str(path) + ".lock"):
        if not path.is_file():
            path.write_bytes(pickle.dumps(check_all()))
        return pickle.loads(path.read_bytes())


def shared_checks(patch: pytest.MonkeyPatch, results) -> None:
    """``Step.check`` of each step in ``theory.STEPS`` returns its result in ``results``
    (:func:`step_results`) instead of running the check again; any other step (a test's
    deliberately broken copy) still runs its own."""
    from ropesplit.theory import STEPS
    from ropesplit.theory.step import Step

    original, mine = Step.check, {id(step): step.id for step in STEPS}

    def check(self):
        return results[mine[id(self)]] if id(self) in mine else original(self)

    patch.setattr(Step, "check", check)


@pytest.fixture(scope="session")
def tiny_model():
    """One shared two-layer tiny Llama (seed 0)."""
    return tiny_llama()


# the tiny model folders of the CLI tests: a Llama shape and a byte-level tokenizer
TINY = dict(
    hidden_size=32,
    num_attention_heads=2,
    num_key_value_heads=1,
    num_hidden_layers=2,
    intermediate_size=32,
    vocab_size=256,
    max_position_embeddings=64,
)
TEXT = "Rotary position embeddings turn each pair of coordinates by an angle. " * 8


def byte_tokenizer():
    """A 256-token byte-level tokenizer (id = byte value), built offline."""
    import transformers as T
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {c: b for b, c in bytes_to_unicode().items()}  # 256 byte tokens, id = byte value
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return T.PreTrainedTokenizerFast(tokenizer_object=tok)


# ESM-2's alphabet, in its vocab.txt's order: 4 specials, 25 residue letters, gap, mask
ESM_VOCAB = ("<cls> <pad> <eos> <unk> L A G V S E R T I D P K Q N F Y M H W C X B U Z O . - "
             "<null_1> <mask>").split()  # fmt: skip


def esm_tokenizer(folder):
    """ESM's own tokenizer class (``EsmTokenizer``) over ESM-2's alphabet, built offline in
    ``folder``: one token per residue between ``<cls>`` and ``<eos>``."""
    import transformers as T

    vocab = folder / "vocab.txt"
    vocab.parent.mkdir(parents=True, exist_ok=True)
    vocab.write_text("\n".join(ESM_VOCAB) + "\n")
    return T.EsmTokenizer(str(vocab))


def save_model(folder, config, *, nan=False, tokenizer=None):
    """A seeded random-init model of ``config`` saved with the byte tokenizer (or
    ``tokenizer``) into ``folder`` (``nan=True`` plants a NaN in layer 0's query weights);
    returns the folder as a string."""
    import math

    import torch

    from ropesplit.empirical.model.loading import model_class

    torch.manual_seed(0)
    model = model_class(config).from_config(config)  # a causal LM, or an encoder's model
    if nan:
        with torch.no_grad():
            model.model.layers[0].self_attn.q_proj.weight[0, 0] = math.nan
    model.save_pretrained(folder)
    (tokenizer or byte_tokenizer()).save_pretrained(folder)
    return str(folder)


# the report's stages sized for a test (tests/report/test_report.py, tests/docs/test_docs_check.py)
N_TOKENS = 48


def _tiny_train():
    from ropesplit.empirical.training.train import TrainConfig

    train = TrainConfig(steps=2, seq_len=16, layers=1, d_model=16, heads=2, d_ff=16, batch=2,
                        warmup=1, checkpoints=2, val_windows=2, n_boot=50, threads=1)  # fmt: skip
    recall = TrainConfig(task="recall", steps=2, seq_len=52, vocab=24, layers=1, d_model=16,
                         heads=2, d_ff=16, batch=2, warmup=1, checkpoints=2, n_boot=50,
                         threads=1)  # fmt: skip
    return train, recall


TINY_TRAIN, TINY_RECALL = _tiny_train()


def tiny_report_settings():
    """The tiny report's run settings: 48 tokens, one seed, 8 passages."""
    from ropesplit.claims.records import ClaimsSettings
    from ropesplit.empirical.experiments.settings import ExperimentSettings
    from ropesplit.report import pipeline

    return pipeline.RunSettings(tokens=N_TOKENS, experiments=ExperimentSettings(draws=1),
                                figure_tokens=24, bound_tokens=64,
                                claims=ClaimsSettings(passages=8, order_passages=8),
                                intervention_tokens=N_TOKENS, claims_ids=tiny_passages(),
                                intervention_ids=_tiny_intervention_passages())  # fmt: skip


def _tiny_load(settings):
    import torch

    from ropesplit.empirical import load_model
    from ropesplit.empirical.model.loading import random_init_twin

    config = llama_config(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=3,
        intermediate_size=64, vocab_size=128, max_position_embeddings=128,
    )  # fmt: skip
    loaded = load_model(config, seed=1)  # the "trained" stand-in
    ids = torch.randint(0, 128, (settings.tokens,), generator=torch.Generator().manual_seed(0))
    return loaded, random_init_twin(loaded, settings.seed), ids, "tiny text"


def tiny_passages():
    """The claims' passages for a model without a tokenizer: seeded random token ids."""
    import torch

    from ropesplit.empirical.model.corpus import PassageIds

    ids = torch.randint(0, 128, (8, 96), generator=torch.Generator().manual_seed(1))
    return PassageIds([f"passage {k}" for k in range(8)], ids, 96, 0, "tiny")


def _tiny_intervention_passages():
    """The interventions' 8 scored and 2 calibration passages, seeded random token ids."""
    import torch

    return torch.randint(0, 128, (10, N_TOKENS), generator=torch.Generator().manual_seed(2))


def tiny_report(patch: pytest.MonkeyPatch) -> None:
    """The report's stages sized for a test: the tiny model and a tiny training (the passages:
    :func:`tiny_report_settings`)."""
    from dataclasses import replace

    from ropesplit.report import stages, training

    patch.setattr(stages, "_load", _tiny_load)
    patch.setattr(training, "REPORT_TRAIN", TINY_TRAIN)  # the train stage, tiny
    patch.setattr(training, "REPORT_RECALL", TINY_RECALL)  # the recall stage, tiny
    encoder = replace(TINY_TRAIN, task="mlm")  # the encoder stage, tiny
    patch.setattr(training, "REPORT_ENCODERS", {"text": encoder, "proteins": encoder})
