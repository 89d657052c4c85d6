"""One JSON reader and one writer (issue 55): run files, prepared data and the checkpoints
`convert` reads all go through keras_ctx.common.files.read_json, so a damaged file is
named in the same words whichever reads it; converted configs are written by
files.write_json (atomic, keys sorted where asked)."""

import json
import os

import pytest

from keras_ctx.common import files
from keras_ctx.common.errors import CheckpointError, DataError, RunDirectoryError
from keras_ctx.convert.base import read_json_object

FIX = "fix or re-download it"


def _dangling(path):
    os.symlink(os.path.join(os.path.dirname(path), "gone"), path)


# (what the file holds, or a function making it, and the problem said after its path)
DAMAGE = {
    "truncated": (b'{"a": 1', "is not valid JSON (Expecting ',' delimiter: line 1 column 8 "
                              f"(char 7)): {FIX}."),
    "latin-1": (b'{"a": "caf\xe9"}', f"is not UTF-8 (byte 10): {FIX}."),
    "deep": (b"[" * 100_000 + b"]" * 100_000, f"nests too deeply: {FIX}."),
    "twice": (b'{"a": 1, "a": 2}', ": the key 'a' appears twice in one object; which value "
                                   "holds is ambiguous: keep one and remove the other."),
}


def _write_bytes(path, content):
    with open(path, "wb") as handle:
        handle.write(content)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_json_file_is_named_alike_by_every_reader(tmp_path, damage):
    content, problem = DAMAGE[damage]
    path = str(tmp_path / "config.json")
    _write_bytes(path, content)
    with pytest.raises(CheckpointError) as converted:
        read_json_object(path)
    with pytest.raises(DataError) as run_file:
        files.read_json(path, None, FIX)
    separator = "" if problem.startswith(":") else " "
    assert str(converted.value) == str(run_file.value) == f"{path}{separator}{problem}"


def test_a_link_to_a_deleted_blob_is_named_by_every_reader(tmp_path):
    path = str(tmp_path / "run.json")
    _dangling(path)
    with pytest.raises(DataError) as run_file:
        files.read_json(path, "a run's run.json")
    with pytest.raises(CheckpointError) as converted:
        read_json_object(path)
    expected = f"{path} is a link to {tmp_path / 'gone'}, which is missing"
    assert str(run_file.value).startswith(expected)
    assert str(converted.value) == str(run_file.value)


def test_the_one_writer_is_atomic_and_sorts_keys_where_asked(tmp_path):
    path = tmp_path / "config.json"
    files.write_json(path, {"b": 1, "a": [1, 2]}, sort_keys=True)
    assert path.read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}'
    assert json.loads(path.read_text()) == files.read_json(path)
    assert sorted(os.listdir(tmp_path)) == ["config.json"]  # no staging file left
    with pytest.raises(RunDirectoryError, match="already exists; pass --overwrite"):
        files.write_json(path, {}, overwrite=False)
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}  # refused: unchanged
