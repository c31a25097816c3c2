"""Rows without a canonical format (SFT's prompt/completion chat rows): checked line by line, then loaded as
they are; a bad file names its line (the table of bad inputs: tests/test_bad_inputs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r3forge.data.rows import check_rows, load_rows
from r3forge.errors import DataFormatError

ROWS = [
    {"prompt": [{"role": "user", "content": "Q?"}], "completion": [{"role": "assistant", "content": "A."}],
     "score": 3},
    {"prompt": [{"role": "user", "content": "R?"}], "completion": [{"role": "assistant", "content": "B."}],
     "score": 4.5},
]  # fmt: skip


def test_jsonl_and_json_array_load_as_they_are(tmp_path: Path):
    lines = tmp_path / "rows.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    array = tmp_path / "rows.json"
    array.write_text(json.dumps(ROWS, indent=1))
    for path in (lines, array):
        ds = load_rows(path, ("prompt", "completion"))
        assert len(ds) == 2 and {"prompt", "completion", "score"} <= set(ds.column_names)
        assert ds[1]["completion"][0]["content"] == "B." and ds[1]["score"] == 4.5  # numbers of both kinds


def test_bad_rows_name_their_line(tmp_path: Path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n" + json.dumps({**ROWS[1], "prompt": "text"}) + "\n")
    with pytest.raises(DataFormatError, match=r"bad.jsonl:3: 'prompt' is text here but a list on line 1"):
        check_rows(path, ("prompt", "completion"))
    assert check_rows(path, ("completion",)) == 2
    with pytest.raises(DataFormatError, match=r"nope.jsonl: no such file"):
        load_rows(tmp_path / "nope.jsonl")
