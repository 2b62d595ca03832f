"""``ropesplit.core.io``: the path checks the CLI runs before any work, and writes that are
whole or nothing (an existing file is never left half-written)."""

from __future__ import annotations

import os
import stat

import pytest

from ropesplit.core import io
from ropesplit.core.errors import RopesplitError


def _listing(folder):
    return sorted(p.name for p in folder.iterdir())


def test_a_failed_write_leaves_the_existing_file_and_no_other(tmp_path, monkeypatch):
    target = tmp_path / "x.json"
    target.write_text("before\n")

    def fail(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io.os, "replace", fail)
    with pytest.raises(RopesplitError, match=r"^cannot write .*x\.json: No space left on device$"):
        io.write_json(target, {"a": 1})
    assert target.read_text() == "before\n" and _listing(tmp_path) == ["x.json"]


def test_a_write_replaces_the_file_keeping_its_mode_and_links(tmp_path):
    target = tmp_path / "x.json"
    target.write_text("before, and longer than what replaces it\n")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    io.write_json(link, [1])
    assert link.is_symlink() and target.read_text() == "[\n  1\n]\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert _listing(tmp_path) == ["link.json", "x.json"]
    new = io.write_text(tmp_path / "new.md", "text\n")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask  # as open() would make it


def test_a_device_is_written_in_place():
    assert io.write_text("/dev/null", "nothing\n") == io.Path("/dev/null")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("adir", "cannot write {t}/adir: it is a folder"),
        ("afile/x.json", "cannot write {t}/afile/x.json: {t}/afile is a file, not a folder"),
        ("missing/x.json", "cannot write {t}/missing/x.json: folder {t}/missing does not exist"),
    ],
)
def test_output_path_refuses_in_one_line_and_makes_nothing(tmp_path, path, message):
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("keep\n")
    with pytest.raises(RopesplitError) as info:
        io.output_path(tmp_path / path)
    assert str(info.value) == message.format(t=tmp_path)
    assert _listing(tmp_path) == ["adir", "afile"] and (tmp_path / "afile").read_text() == "keep\n"


def test_a_folder_that_takes_no_files_is_found_by_trying():
    """Root passes every permission check (os.access), yet cannot make a file in /proc."""
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    with pytest.raises(RopesplitError, match=r"^cannot write /proc/x\.json: folder /proc takes"):
        io.output_path("/proc/x.json")
    with pytest.raises(RopesplitError, match=r"^cannot write /proc/new: folder /proc takes"):
        io.check_output_folder("/proc/new")


def test_check_output_folder_makes_nothing_and_output_folder_makes_only_the_folder(tmp_path):
    (tmp_path / "afile").write_text("keep\n")
    assert io.check_output_folder(tmp_path / "new") == tmp_path / "new"
    assert _listing(tmp_path) == ["afile"]
    with pytest.raises(RopesplitError, match="it is a file, not a folder$"):
        io.output_folder(tmp_path / "afile", "the report")
    assert io.output_folder(tmp_path / "new", "the report").is_dir()
    assert _listing(tmp_path) == ["afile", "new"] and _listing(tmp_path / "new") == []


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.txt", None, "text file {p} does not exist"),
        ("adir", None, "text file {p} is a folder, not a file"),
        ("latin.txt", b"caf\xe9\n", "text file {p} is not UTF-8 text"),
    ],
)
def test_input_file_says_what_is_wrong(tmp_path, name, content, message):
    (tmp_path / "adir").mkdir()
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(RopesplitError) as info:
        io.input_file(path, "text file")
    assert str(info.value) == message.format(p=path)
    if content is not None:  # bytes are not text, but can be read
        assert io.input_file(path, "GGUF file", text=False) == path


def test_read_json_refuses_what_is_not_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("{\n")
    with pytest.raises(RopesplitError, match=r"^record .*x\.json is not JSON: "):
        io.read_json(path, "record")
    path.write_text('{"a": [1, null]}')
    assert io.read_json(path, "record") == {"a": [1, None]}
