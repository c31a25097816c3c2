"""Rows that have no canonical format (the prompt/completion chat rows of SFT), from one local JSON lines or
JSON array file, checked line by line before Arrow sees them: every record a JSON object with the asked-for
columns, each column of one JSON type down the file. As with the canonical loaders (`loaders.py`), a bad
file is a `DataFormatError` naming the file and line, never a `DatasetGenerationError`.

    train = load_rows("runs/annotate/rules/sft.jsonl", columns=("prompt", "completion"))
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
from datasets.exceptions import DatasetGenerationError

from r3forge.data.jsonio import iter_json_records
from r3forge.errors import DataFormatError


def load_rows(path: str | os.PathLike[str], columns: Sequence[str] = ()) -> datasets.Dataset:
    """The rows of one local JSON lines / JSON array file as they are, checked record by record first
    (`check_rows`); a file Arrow cannot hold as one table is a `DataFormatError` too."""
    file = Path(path).expanduser()
    if not file.is_file():
        what = "a folder, not a .json/.jsonl file" if file.is_dir() else "no such file"
        raise DataFormatError(path, None, what)
    check_rows(file, columns)
    try:
        return datasets.Dataset.from_json(str(file))
    except DatasetGenerationError as e:
        cause: BaseException = e
        while cause.__cause__ or cause.__context__:
            cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
        raise DataFormatError(file, None, f"cannot be loaded as one table: {cause}") from None


def check_rows(path: Path, columns: Sequence[str]) -> int:
    """Check every record of a JSON lines / array file: a JSON object holding `columns`, each of the JSON
    type (text, list, object, number) it has in the first record. Returns the number of records;
    `DataFormatError` at the line of the first bad one (an empty file, invalid UTF-8 or JSON included)."""
    kinds: dict[str, tuple[str, int]] = {}
    count = 0
    for line, record in iter_json_records(path):
        count += 1
        if not isinstance(record, dict):
            raise DataFormatError(path, line, f"expected a JSON object per row, got {type(record).__name__}")
        missing = [c for c in columns if c not in record]
        if missing:
            raise DataFormatError(path, line, f"missing column(s) {missing} (has {sorted(record)})")
        for column in columns:
            kind = _json_kind(record[column])
            first = kinds.setdefault(column, (kind, line))
            if kind != first[0]:
                raise DataFormatError(
                    path, line, f"'{column}' is {kind} here but {first[0]} on line {first[1]}"
                )
    if count == 0:
        raise DataFormatError(path, None, "no records (empty file)")
    return count


def _json_kind(value: Any) -> str:
    if isinstance(value, str):
        return "text"
    if isinstance(value, list | dict):
        return "a list" if isinstance(value, list) else "an object"
    return "null" if value is None else "a number" if isinstance(value, int | float) else type(value).__name__


def split_by_question(
    records: list[dict[str, Any]], validation_fraction: float, seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, validation): a seeded shuffle of the distinct question ids (a row's `group_id` where it has one:
    a sub-question goes with its question), the first share held out.

    >>> rows = [{"question_id": q, "group_id": g} for q, g in (("a", None), ("b", None), ("b1", "b"), ("c", None))]
    >>> train, validation = split_by_question(rows, 0.34, seed=0)
    >>> sorted(r["question_id"] for r in validation), len(train) + len(validation)
    (['a'], 4)
    """
    key = [str(r.get("group_id") or r["question_id"]) for r in records]
    questions = sorted(set(key))
    random.Random(seed).shuffle(questions)
    held = set(questions[: round(validation_fraction * len(questions))])
    return [r for r, k in zip(records, key, strict=True) if k not in held], [
        r for r, k in zip(records, key, strict=True) if k in held
    ]
