"""A corpus of passages (``empirical.model.corpus``): reading, splitting, token ids.

Folders, JSONL and plain text files are written in ``tmp_path``; the token ids
come from a tiny Llama built from a config with the byte-level tokenizer of
``empirical.training.train`` (id = byte, BOS 256 prepended), so nothing is downloaded.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers as T
from conftest import llama_config

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.model.corpus import (
    DEFAULT_CORPUS,
    Passage,
    PassageIds,
    corpus_from_spec,
    default_corpus,
    passage_ids,
    read_corpus,
)
from ropesplit.empirical.model.loading import load_model
from ropesplit.empirical.model.text import tokenize
from ropesplit.empirical.training.train_setup import BOS, VOCAB, byte_tokenizer

CONTEXT = 64


@pytest.fixture(scope="module")
def loaded():
    config = llama_config(
        hidden_size=16, num_attention_heads=2, num_key_value_heads=1, num_hidden_layers=1,
        intermediate_size=16, vocab_size=VOCAB, max_position_embeddings=CONTEXT,
        bos_token_id=BOS,
    )  # fmt: skip
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(config)
    return load_model(model, tokenizer=byte_tokenizer(), name="tiny")


def passages(*lengths: int) -> list[Passage]:
    """Passages of the given lengths in bytes (= tokens, + BOS), named p0, p1, ..."""
    return [Passage(f"p{i}", (chr(ord("a") + i % 26) * n)) for i, n in enumerate(lengths)]


# reading a corpus


def test_folder_gives_one_passage_per_txt_file_sorted_by_name(tmp_path):
    (tmp_path / "b.txt").write_text("  second\n\n\n\nstill second\n", encoding="utf-8")
    (tmp_path / "a.txt").write_text("first", encoding="utf-8")
    (tmp_path / "c.md").write_text("not a passage", encoding="utf-8")
    (tmp_path / "empty.txt").write_text(" \n", encoding="utf-8")  # dropped
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "0.txt").write_text("not read", encoding="utf-8")
    got = read_corpus(tmp_path)
    assert got == [Passage("a", "first"), Passage("b", "second\n\n\n\nstill second")]


def test_jsonl_gives_one_passage_per_line_named_by_id_name_or_line(tmp_path):
    lines = [
        json.dumps({"id": "intro", "text": " Hello. "}),
        "",
        json.dumps({"name": "second", "text": "World."}),
        json.dumps({"text": "Unnamed."}),
        json.dumps({"id": 7, "text": "Numbered.", "extra": 1}),
        json.dumps({"text": "   "}),  # empty: dropped
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert read_corpus(path) == [
        Passage("intro", "Hello."),
        Passage("second", "World."),
        Passage("line 4", "Unnamed."),
        Passage("7", "Numbered."),
    ]


def test_plain_text_splits_at_two_or_more_blank_lines(tmp_path):
    text = (
        "First paragraph.\n\nSame passage, one blank line.\n"
        "\n \t\n"  # two blank lines (one of spaces): a break
        "Second passage.\n"
        "\n\n\n\n"  # four blank lines: one break
        "Third passage.\n"
    )
    path = tmp_path / "book.txt"
    path.write_text(text, encoding="utf-8")
    assert read_corpus(path) == [
        Passage("line 1", "First paragraph.\n\nSame passage, one blank line."),
        Passage("line 6", "Second passage."),
        Passage("line 11", "Third passage."),
    ]
    one = tmp_path / "one.md"
    one.write_text("\n\nNo break.\n\nAt all.\n", encoding="utf-8")
    assert read_corpus(one) == [Passage("line 3", "No break.\n\nAt all.")]
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"A.\r\n\r\n\r\nB.\r\n")
    assert [p.text for p in read_corpus(crlf)] == ["A.", "B."]


def test_reading_errors_are_one_line(tmp_path):
    def fails(path, start):
        with pytest.raises(RopesplitError) as info:
            read_corpus(path)
        message = str(info.value)
        assert message.startswith(start) and "\n" not in message, message

    fails(tmp_path / "missing", f"corpus path {tmp_path / 'missing'} does not exist")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("x", encoding="utf-8")
    fails(tmp_path / "docs", f"corpus folder {tmp_path / 'docs'} holds no .txt files")
    bad = tmp_path / "bad.jsonl"
    for line in ("[1, 2]", "{not json", '{"text": 3}', '{"name": "x"}'):
        bad.write_text(json.dumps({"text": "ok"}) + "\n\n" + line + "\n", encoding="utf-8")
        fails(bad, f'{bad} line 3 is not a JSON object with a string "text"')
    bad.write_text(json.dumps({"text": "ok", "id": [1]}), encoding="utf-8")
    fails(bad, f"{bad} line 1: id or name must be a string or integer")
    bad.write_text('{"text": "a", "id": "x"}\n{"text": "b", "name": "x"}\n', encoding="utf-8")
    fails(bad, f"{bad} line 2: name 'x' repeats line 1")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("café".encode("latin-1"))
    fails(latin, f"corpus file {latin} is not UTF-8 text")
    (tmp_path / "latin_dir").mkdir()
    (tmp_path / "latin_dir" / "x.txt").write_bytes(b"\xff")
    fails(tmp_path / "latin_dir", "corpus file ")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n\n\n\t\n", encoding="utf-8")
    fails(blank, f"corpus {blank} has no non-empty passage")
    (tmp_path / "blank.jsonl").write_text('{"text": ""}\n', encoding="utf-8")
    fails(tmp_path / "blank.jsonl", f"corpus {tmp_path / 'blank.jsonl'} has no non-empty")


def test_default_corpus_is_the_sorted_pydoc_topics():
    from pydoc_data.topics import topics

    first, second = default_corpus(), default_corpus()
    assert first == second
    names = [p.name for p in first]
    assert names == sorted(topics) and len(set(names)) == len(names)
    assert all(p.text and p.text == p.text.strip() for p in first)
    assert first[0] == Passage("assert", topics["assert"].strip())


def test_corpus_from_spec(tmp_path):
    assert corpus_from_spec(None) == (DEFAULT_CORPUS, default_corpus())
    assert corpus_from_spec("pydoc") == ("pydoc", default_corpus())
    path = tmp_path / "c.txt"
    path.write_text("one\n\n\ntwo", encoding="utf-8")
    label, got = corpus_from_spec(str(path))
    assert label == str(path) and [p.text for p in got] == ["one", "two"]
    with pytest.raises(RopesplitError, match="^corpus path nope.jsonl does not exist$"):
        corpus_from_spec("nope.jsonl")


# token ids


def test_passage_ids_keep_long_passages_in_order_with_bos(loaded):
    corpus = passages(40, 10, 30, 5, 60)
    got = passage_ids(loaded, corpus, 20)
    assert isinstance(got, PassageIds)
    assert got.names == ["p0", "p2", "p4"] and got.skipped == 2 and got.n_tokens == 20
    assert got.ids.shape == (3, 20) and got.ids.dtype == torch.int64
    assert got.ids[:, 0].tolist() == [BOS] * 3  # the model saw BOS at position 0
    assert got.ids[1, 1:].tolist() == [ord("c")] * 19
    for row, passage in zip(got.ids, [corpus[0], corpus[2], corpus[4]], strict=True):
        assert row.tolist() == tokenize(loaded, passage.text, 20).tolist()
    # exactly n_tokens tokens (BOS + 19 bytes) is long enough; one fewer is not
    edge = passage_ids(loaded, passages(19, 18, 19), 20)
    assert edge.names == ["p0", "p2"] and edge.skipped == 1


def test_passage_ids_without_bos_and_count(loaded):
    corpus = passages(40, 10, 30, 5, 60)
    plain = passage_ids(loaded, corpus, 20, bos=False)
    assert plain.ids.shape == (3, 20) and BOS not in plain.ids.tolist()[0]
    assert plain.ids[0].tolist() == [ord("a")] * 20
    full = passage_ids(loaded, passages(CONTEXT, CONTEXT), CONTEXT, bos=False)
    assert full.ids.shape == (2, CONTEXT)  # no BOS: the whole context is text
    first2 = passage_ids(loaded, corpus, 20, count=2)
    assert first2.names == ["p0", "p2"] and first2.ids.shape == (2, 20)
    assert first2.skipped == 1  # reading stops once count passages are found
    assert torch.equal(first2.ids, passage_ids(loaded, corpus, 20).ids[:2])
    assert passage_ids(loaded, corpus, 20, count=10).names == ["p0", "p2", "p4"]


def test_passage_ids_sha256_is_deterministic_and_tracks_the_ids(loaded):
    corpus = passages(40, 30, 60)
    a, b = passage_ids(loaded, corpus, 20), passage_ids(loaded, corpus, 20)
    assert a.sha256 == b.sha256 and len(a.sha256) == 64
    assert passage_ids(loaded, corpus, 21).sha256 != a.sha256
    assert passage_ids(loaded, corpus[::-1], 20).sha256 != a.sha256
    assert passage_ids(loaded, corpus, 20, bos=False).sha256 != a.sha256


def test_passage_ids_errors_are_one_line(loaded):
    corpus = passages(40, 10, 30, 5, 60)
    with pytest.raises(RopesplitError) as info:
        passage_ids(loaded, corpus, 20, min_count=4)
    assert str(info.value) == (
        "the corpus has 3 passages of at least 20 tokens, need at least 4 "
        "(use fewer --tokens or a larger --corpus)"
    )
    with pytest.raises(RopesplitError, match="^the corpus has 1 passage of at least 50 tokens"):
        passage_ids(loaded, corpus, 50)
    with pytest.raises(RopesplitError, match="^--tokens 65 exceeds the model's context of 64"):
        passage_ids(loaded, corpus, CONTEXT + 1)
    with pytest.raises(RopesplitError, match="^tokens must be at least 2, got 1"):
        passage_ids(loaded, corpus, 1)
    with pytest.raises(RopesplitError, match="^count must be at least min_count 2, got 1"):
        passage_ids(loaded, corpus, 20, count=1)
    with pytest.raises(RopesplitError, match="^min_count must be at least 1, got 0"):
        passage_ids(loaded, corpus, 20, min_count=0)
    assert passage_ids(loaded, corpus, 20, count=1, min_count=1).names == ["p0"]
    bare = load_model(loaded.model, name="bare")
    with pytest.raises(RopesplitError, match="^bare has no tokenizer; a corpus needs one$"):
        passage_ids(bare, corpus, 20)


def test_the_prose_corpus_is_prose_and_the_measure_tells_code_apart():
    """The second corpus really is prose (King James Bible, one passage per book);
    the measure reads code as code (a Python source file) and the default corpus in between
    (prose with code in it)."""
    from pathlib import Path

    import numpy as np

    from ropesplit.empirical.model.corpus import corpus_from_spec, default_corpus, prose_measures

    label, prose = corpus_from_spec("prose")
    assert label == "prose" and len(prose) == 66 and prose[0].name == "Genesis"
    assert prose[0].text.startswith("In the beginning God created the heaven and the earth.")
    measures = [prose_measures(p.text) for p in prose]
    assert max(m["code_chars"] for m in measures) < 0.01
    assert max(m["indented"] for m in measures) == 0.0
    assert min(m["words"] for m in measures) > 0.99
    code = prose_measures((Path(__file__).parents[2] / "numerics" / "stats.py").read_text())
    assert code["code_chars"] > 0.1 and code["indented"] > 0.5 and code["words"] < 0.7
    pydoc = [prose_measures(p.text) for p in default_corpus()]
    assert np.median([m["code_chars"] for m in pydoc]) > 5 * max(m["code_chars"]
                                                                 for m in measures)


def test_fasta_gives_one_passage_per_sequence_named_by_its_header(tmp_path):
    path = tmp_path / "two.faa"
    path.write_text(">sp|P1|ONE first protein\nMKTL\nLV \n\n>two\nGGA\n")
    assert [(p.name, p.text) for p in read_corpus(path)] == [("sp|P1|ONE", "MKTLLV"),
                                                              ("two", "GGA")]  # fmt: skip
    plain = tmp_path / "no_suffix"
    plain.write_text(">x\nMK\n")  # a text opening with '>' reads as FASTA too
    assert [p.text for p in read_corpus(plain)] == ["MK"]
    for bad, message in (("MKT\n>x\nMK\n", "does not start with a FASTA header"),
                         (">x\n>y\nMK\n", "record 'x' has no sequence")):  # fmt: skip
        path.write_text(bad)
        with pytest.raises(RopesplitError, match=message):
            read_corpus(path)


def test_the_swissprot_corpus_is_the_bundled_real_sequences():
    """24 UniProtKB sequences (data/SOURCE.md), in file order, residues only."""
    label, passages = corpus_from_spec("swissprot")
    assert label == "swissprot" and len(passages) == 24
    assert passages[0].name == "tr|F2CXE6|F2CXE6_HORVD" and passages[-1].name.endswith("CEF_BPT4")
    assert all(set(p.text) <= set("ACDEFGHIKLMNPQRSTVWYXUBZO") for p in passages)
    assert sorted(len(p.text) for p in passages)[::23] == [38, 1520]
