r"""A GGUF file de-quantised once, kept as a transformers folder that later loads read.

Loading a GGUF through transformers parses its metadata for the config and again
for the tokenizer, then de-quantises every tensor in Python, at every start: most of
the embedded SmolLM2-135M's load (the times: docs/install.md). The result is always
the same float32 tensors, so :func:`converted` keeps it: the config, the tokenizer
and the de-quantised weights (``model.safetensors``, float32) in a folder of the
cache named by the GGUF's sha256 and the versions of transformers and gguf that
de-quantised it. A later load reads that folder, with no parsing and no
de-quantising; its weights, tokenizer and config equal the GGUF's own load
(``tests/empirical/test_converted.py``), so every number measured from it is the same.

The cache is ``$ROPESPLIT_CACHE`` (``none``: no cache, the GGUF is read every
time), else ``$XDG_CACHE_HOME/ropesplit``, else ``~/.cache/ropesplit``; a folder
appears there whole or not at all (written beside it, then renamed). It holds four
bytes per weight (520 MB for a 135M model): delete the folder to reclaim it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_root", "converted", "gguf_key"]

CACHE_ENV = "ROPESPLIT_CACHE"  # the cache folder; "none" turns the cache off
_WEIGHTS = "model.safetensors"


def cache_root() -> Path | None:
    """The cache folder (module docstring), or None where ``$ROPESPLIT_CACHE`` is ``none``."""
    value = os.environ.get(CACHE_ENV)
    if value is not None and value.strip():
        return None if value.strip().lower() == "none" else Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (KeyError, RuntimeError):  # no home to resolve: no cache
            return None
    return Path(base) / "ropesplit"


def gguf_key(path: Path) -> str:
    """The sha256 of the GGUF's bytes and of the versions of transformers and gguf that
    de-quantise it (a new release may de-quantise differently: a new folder)."""
    from importlib.metadata import version

    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    digest.update(f"transformers {version('transformers')}; gguf {version('gguf')}".encode())
    return digest.hexdigest()[:32]


def converted(folder: str, gguf_file: str) -> str | None:
    """The cache folder holding ``folder/gguf_file`` de-quantised (config, tokenizer,
    float32 weights), made now when absent; None when there is no cache or it cannot be
    written (the caller then reads the GGUF itself). A GGUF transformers cannot load raises
    what its loader raises, as a direct load would."""
    root = cache_root()
    if root is None:
        return None
    target = root / "gguf" / gguf_key(Path(folder) / gguf_file)
    if (target / _WEIGHTS).is_file():
        return str(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".partial-", dir=target.parent))
    except OSError:  # a read-only or missing home: no cache
        return None
    try:
        _write(folder, gguf_file, scratch)
        os.replace(scratch, target)  # whole or not at all
    except OSError:  # a full disk, or another process renamed its copy first
        shutil.rmtree(scratch, ignore_errors=True)
        return str(target) if (target / _WEIGHTS).is_file() else None
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return str(target)


def _write(folder: str, gguf_file: str, into: Path) -> None:
    """Load the GGUF once (float32) and save its config, tokenizer and weights into ``into``."""
    import torch
    from safetensors.torch import save_model
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from ropesplit.empirical.adapter.configs import save_config

    config = AutoConfig.from_pretrained(folder, gguf_file=gguf_file)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, config=config,
                                                 dtype=torch.float32)  # fmt: skip
    save_model(model, str(into / _WEIGHTS))  # tied tensors once (SmolLM2's head and embedding)
    save_config(config, into)
    tokenizer.save_pretrained(into)
