"""The one JSON I/O module: line-numbered reading of JSON lines, JSON arrays and top-level JSON objects, and
the writers every run file goes through (`write_json`, `write_jsonl`, `append_jsonl`).

Writers share one policy for numbers JSON has no word for: NaN (an undefined metric, e.g. the Spearman of a
constant) is written as `null`; +-inf stays a float (JSON's `Infinity` / `-Infinity`, which Python's `json`
and pandas read back: `eval rag`'s threshold T_p = -inf means "admit everything" and must survive a round
trip). Tensors and NumPy scalars become floats; anything else unknown its `str`. Whole-file writes are
atomic (a kill mid-write leaves the old file; a failed write leaves no `.tmp`) and create the parent folder.

Every reader yields `(line, value)` pairs, where `line` is the 1-based line on which the value starts, so
callers can report "file:line: what is wrong". Three layouts are understood:

* `jsonl`: one JSON value per line (blank lines skipped), read line by line.
* `array`: a JSON array of records (`[{...}, {...}]`), decoded one element at a time with
  `json.JSONDecoder.raw_decode`: the file's text is held in memory, but only one decoded record at a time.
* `object`: a JSON object whose entries are the records (e.g. HotpotQA's `{title: [sentences]}` corpus);
  each value is yielded as a `(key, value)` tuple.

Malformed input raises `DataFormatError` naming the file and the line (and column for syntax errors).
"""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from r3forge.errors import DataFormatError

Layout = Literal["jsonl", "array", "object"]

JSONL_SUFFIXES = (".jsonl", ".ndjson")
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def detect_layout(path: Path) -> Layout:
    """Tell JSON lines from a JSON array or object by the first character, the suffix and the first line."""
    with path.open("rb") as f:
        head = f.read(1 << 16).removeprefix(codecs.BOM_UTF8)
    stripped = head.lstrip()
    if not stripped:
        raise DataFormatError(path, None, "empty file (no records)")
    first = stripped[:1]
    if first == b"[":
        return "array"
    if first != b"{":
        line = head[: len(head) - len(stripped)].count(b"\n") + 1
        raise DataFormatError(path, line, "expected JSON lines, a JSON array or a JSON object")
    if path.suffix.lower() in JSONL_SUFFIXES:
        return "jsonl"
    # A `.json` file that starts with an object: JSON lines when its first line is a complete value and more
    # lines follow; otherwise one JSON object document (possibly pretty-printed over many lines).
    with path.open("rb") as f:
        lines = [raw for raw in (f.readline(), f.readline()) if raw.strip()]
    try:
        json.loads(lines[0].removeprefix(codecs.BOM_UTF8))
    except ValueError:
        return "object"
    return "jsonl" if len(lines) > 1 else "object"


def iter_json_records(path: Path, layout: Layout | None = None) -> Iterator[tuple[int, Any]]:
    """Yield `(line, record)` for every record of `path` (layout detected when not given)."""
    layout = layout or detect_layout(path)
    if layout == "jsonl":
        yield from _iter_jsonl(path)
    else:
        yield from _iter_document(path, layout)


def first_record(path: Path) -> tuple[int, Any]:
    """The first `(line, record)` of `path`; `DataFormatError` when it holds none."""
    for item in iter_json_records(path):
        return item
    raise DataFormatError(path, None, "no records (empty file)")


def _iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open("rb") as f:
        for line, raw in enumerate(f, start=1):
            if line == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataFormatError(path, line, f"not valid UTF-8 ({e.reason} at byte {e.start})") from None
            try:
                yield line, json.loads(text)
            except json.JSONDecodeError as e:
                raise DataFormatError(path, line, f"invalid JSON at column {e.colno}: {e.msg}") from None


def _iter_document(path: Path, layout: Layout) -> Iterator[tuple[int, Any]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataFormatError(path, None, f"not valid UTF-8 ({e.reason} at byte {e.start})") from None
    reader = _DocumentReader(path, text)
    close = "]" if layout == "array" else "}"
    reader.expect("[" if layout == "array" else "{")
    if reader.peek() == close:
        reader.pos += 1
    else:
        while True:
            reader.peek()
            line, key = reader.line(), None
            if layout == "object":
                key = reader.decode()
                if not isinstance(key, str):
                    raise reader.error("expected a string key")
                reader.expect(":")
            value = reader.decode()
            yield line, (value if key is None else (key, value))
            sep = reader.peek()
            if sep not in (",", close):
                raise reader.error(f"expected ',' or {close!r}, found {sep or 'end of file'!r}")
            reader.pos += 1
            if sep == close:
                break
    if reader.peek():
        raise reader.error("unexpected data after the end of the JSON document")


class _DocumentReader:
    """A cursor over one JSON document's text that decodes values one at a time and tracks line numbers."""

    def __init__(self, path: Path, text: str):
        self.path, self.text, self.pos = path, text, 0
        self._line, self._line_pos = 1, 0

    def line(self) -> int:
        """1-based line of the current position (counted incrementally)."""
        self._line += self.text.count("\n", self._line_pos, self.pos)
        self._line_pos = self.pos
        return self._line

    def peek(self) -> str:
        """Skip whitespace and return the next character ('' at the end)."""
        self.pos = _WS.match(self.text, self.pos).end()
        return self.text[self.pos : self.pos + 1]

    def expect(self, char: str) -> None:
        """Consume `char` (after whitespace) or raise."""
        if self.peek() != char:
            found = self.text[self.pos : self.pos + 1] or "end of file"
            raise self.error(f"expected {char!r}, found {found!r}")
        self.pos += 1

    def decode(self) -> Any:
        """Decode the JSON value at the current position."""
        self.peek()
        try:
            value, self.pos = _DECODER.raw_decode(self.text, self.pos)
        except json.JSONDecodeError as e:
            raise DataFormatError(self.path, e.lineno, f"invalid JSON at column {e.colno}: {e.msg}") from None
        return value

    def error(self, message: str) -> DataFormatError:
        """A `DataFormatError` at the current position."""
        line = self.line()
        column = self.pos - (self.text.rfind("\n", 0, self.pos) + 1) + 1
        return DataFormatError(self.path, line, f"invalid JSON at column {column}: {message}")


def finite(value: Any) -> Any:
    """NaN -> None, recursively through dicts, lists and tuples; +-inf kept.

    >>> finite({"rho": float("nan"), "t": [float("-inf"), 0.5]})
    {'rho': None, 't': [-inf, 0.5]}
    """
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def _default(value: Any) -> Any:
    """A tensor / NumPy scalar -> float (NaN -> None); anything else -> str."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return None if math.isnan(number) else number


def dumps(value: Any, indent: int | None = None) -> str:
    """One value as JSON text under the module's policy (no trailing newline)."""
    return json.dumps(finite(value), indent=indent, ensure_ascii=False, default=_default)


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except BaseException:  # e.g. `path` is a folder: no stray .tmp beside it
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, payload: Any, indent: int = 1) -> None:
    """`payload` as one JSON document (indented), atomically."""
    _replace(Path(path), dumps(payload, indent) + "\n")


def write_jsonl(path: Path, rows: Iterable[Any]) -> None:
    """One JSON value a line, atomically."""
    _replace(Path(path), "".join(dumps(row) + "\n" for row in rows))


def append_jsonl(path: Path, rows: Iterable[Any]) -> None:
    """Append one JSON value a line (a log that grows while a run goes on: metrics, rollouts)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.writelines(dumps(row) + "\n" for row in rows)


def read_jsonl(path: Path) -> list[Any]:
    """Every value of a JSON lines file ([] when it does not exist); a bad line raises `DataFormatError`
    naming it."""
    path = Path(path)
    return [value for _, value in _iter_jsonl(path)] if path.is_file() else []
