"""The de-quantised GGUF cache (empirical.model.converted): where it lives, that a folder appears
whole or not at all, and that a model read from it is the GGUF's own, weight for weight."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.model.converted import CACHE_ENV, cache_root, converted, gguf_key
from ropesplit.empirical.model.loading import default_model_path, load_model


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    monkeypatch.setenv(CACHE_ENV, "None")
    assert cache_root() is None
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "ropesplit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "ropesplit"


def test_the_key_is_the_files_bytes(tmp_path):
    one, two, same = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    one.write_bytes(b"GGUF" + bytes(range(256)) * 9000)
    two.write_bytes(b"GGUF" + bytes(range(256)) * 9000 + b"\0")
    same.write_bytes(one.read_bytes())
    assert gguf_key(one) == gguf_key(same) != gguf_key(two)


def test_no_cache_where_it_cannot_be_written(monkeypatch, tmp_path):
    """A cache path that is a file: no folder can be made, the caller reads the GGUF."""
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv(CACHE_ENV, str(blocked))
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert converted(str(tmp_path), "m.gguf") is None
    monkeypatch.setenv(CACHE_ENV, "none")
    assert converted(str(tmp_path), "m.gguf") is None


def test_a_gguf_transformers_cannot_read_leaves_nothing_behind(monkeypatch, tmp_path):
    """A junk GGUF fails as a direct load would (one line through load_model), and no
    partial folder stays in the cache."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "junk.gguf").write_bytes(b"not a gguf at all" * 100)
    with pytest.raises(RopesplitError, match=r"^cannot load GGUF file junk.gguf: "):
        load_model(str(folder), "junk.gguf")
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []


@pytest.mark.slow  # the real model, read twice from its GGUF
def test_the_cached_model_is_the_ggufs_own(monkeypatch, tmp_path_factory):
    """Through the cache (made on the first load, read on the second) the weights, the
    tokenizer's ids, the config and the name equal a direct read of the GGUF."""
    import torch
    from conftest import SMOLLM2_CACHE, shared_tmp

    from ropesplit.empirical import default_text, tokenize

    cache = shared_tmp(tmp_path_factory) / SMOLLM2_CACHE  # test_empirical_analyze reads it too
    monkeypatch.setenv(CACHE_ENV, "none")
    direct = load_model()
    monkeypatch.setenv(CACHE_ENV, str(cache))
    made = load_model()
    (folder,) = (cache / "gguf").iterdir()
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    cached = load_model()
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp  # read, not rewritten
    assert folder.name == gguf_key(Path(os.path.join(*default_model_path())))
    want = direct.model.state_dict()
    for got in (made, cached):
        assert got.name == direct.name
        weights = got.model.state_dict()
        assert weights.keys() == want.keys()
        assert all(torch.equal(weights[k], want[k]) for k in want)
        ids = tokenize(got, default_text(), 2048)
        assert ids.tolist() == tokenize(direct, default_text(), 2048).tolist()
        mine, theirs = got.model.config.to_dict(), direct.model.config.to_dict()
        theirs.pop("quantization_config")  # the GGUF's own load says it was de-quantised
        assert mine == theirs
