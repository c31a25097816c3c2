"""`r3forge.data.jsonio`'s writers: a failed whole-file write leaves the old state and no `.tmp` file."""

from __future__ import annotations

from pathlib import Path

import pytest

from r3forge.data.jsonio import read_jsonl, write_json, write_jsonl


def test_a_write_over_a_folder_fails_and_leaves_no_tmp(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    (folder / "kept").mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        write_jsonl(folder, [{"a": 1}])
    with pytest.raises(IsADirectoryError):
        write_json(folder, {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and (folder / "kept").is_dir()


def test_write_then_read_back(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "rows.jsonl"
    write_jsonl(path, [{"a": 1, "nan": float("nan")}, {"b": "é"}])
    assert read_jsonl(path) == [{"a": 1, "nan": None}, {"b": "é"}]
    assert sorted(p.name for p in path.parent.iterdir()) == ["rows.jsonl"]
