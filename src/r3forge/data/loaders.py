"""Dataset loaders: local JSON/JSONL files, or the Hub, -> `datasets.Dataset` in canonical form.

    qa = load_qa("../shared/data/hotpotqa/rpt_distractor_dev_sample_dev.jsonl")   # format detected
    corpus = load_corpus("../shared/data/wiki_paragraphs/*.jsonl")                 # parts concatenated
    qa = load_qa("hf://hotpotqa/hotpot_qa:distractor@validation")                  # needs network

QA formats (`QA_FEATURES`): flashrag, hotpotqa_hf, hotpotqa, musique, popqa, nq_open, ambigqa, triviaqa,
squad. Corpus formats (`PASSAGE_FEATURES`): flashrag_corpus, passages. Any format may come as JSON lines, a
JSON array or (for `passages`) a `{title: [sentences]}` object. See `formats.py` for field mappings, the
id rules and graded relevance.

Local files stream into Arrow through `Dataset.from_generator` (one record in Python at a time); its cache is
keyed by each file's resolved path, size and mtime, so an edited file is read again. A malformed record
raises `DataFormatError` ("file:line: what is wrong"), never a wrapped `DatasetGenerationError`.
"""

from __future__ import annotations

import functools
import glob
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.compute as pc
from datasets.exceptions import DatasetGenerationError

from r3forge.data.formats import (
    CORPUS_CONVERTERS,
    DEFAULT_SOURCES,
    QA_CONVERTERS,
    Converter,
    RecordContext,
    RecordError,
)
from r3forge.data.jsonio import detect_layout, first_record, iter_json_records
from r3forge.data.records import PASSAGE_FEATURES, QA_FEATURES
from r3forge.errors import DataFormatError

QA_FORMATS = tuple(QA_CONVERTERS)
CORPUS_FORMATS = tuple(CORPUS_CONVERTERS)
DATA_SUFFIXES = (".json", ".jsonl", ".ndjson")
PathSpec = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]

# Bump when converters change what they emit for the same input, so cached Arrow files are not reused.
_CACHE_VERSION = 1
_HUB_URI = re.compile(
    r"hf://(?P<repo>[\w.-]+(?:/[\w.-]+)?)(?::(?P<config>[\w.-]+))?(?:@(?P<split>[\w.:%\[\]+-]+))?"
)


@dataclass(frozen=True)
class _Kind:
    name: str
    converters: dict[str, Converter]
    features: datasets.Features
    other: str  # the loader for the other kind, named in errors


_QA = _Kind("QA", QA_CONVERTERS, QA_FEATURES, "load_corpus/iter_corpus")
_CORPUS = _Kind("corpus", CORPUS_CONVERTERS, PASSAGE_FEATURES, "load_qa/iter_qa")


@dataclass(frozen=True)
class HubSpec:
    """A parsed `hf://org/name[:config][@split]` URI."""

    repo: str
    config: str | None = None
    split: str | None = None

    @property
    def name(self) -> str:
        """The dataset name without its organization."""
        return self.repo.rsplit("/", 1)[-1]


def parse_hub_uri(uri: str) -> HubSpec:
    """Parse `hf://org/name[:config][@split]` (split may carry a slice, e.g. `@validation[:100]`).

    >>> parse_hub_uri("hf://hotpotqa/hotpot_qa:distractor@validation")
    HubSpec(repo='hotpotqa/hotpot_qa', config='distractor', split='validation')
    """
    match = _HUB_URI.fullmatch(uri.strip())
    if match is None:
        raise ValueError(f"not a Hub dataset URI: {uri!r} (expected hf://org/name[:config][@split])")
    return HubSpec(**match.groupdict())


def guess_format(record: Any, name: str = "") -> str | None:
    """Format name from a first record's keys (and the file/dataset `name` for look-alikes); None if unknown."""
    if isinstance(record, tuple):
        return "passages"
    if not isinstance(record, dict):
        return None
    keys = set(record)
    paragraphs = record.get("paragraphs")
    first_paragraph = paragraphs[0] if isinstance(paragraphs, list) and paragraphs else {}
    if "contents" in keys:
        return "flashrag_corpus"
    if "golden_answers" in keys:
        return "flashrag"
    if {"context", "supporting_facts"} <= keys:
        return "hotpotqa_hf" if isinstance(record["context"], dict) else "hotpotqa"
    if "question_decomposition" in keys or (
        isinstance(first_paragraph, dict) and "paragraph_text" in first_paragraph
    ):
        return "musique"
    if "possible_answers" in keys:
        return "popqa"
    if "question_id" in keys or "turns" in keys:
        return "triviaqa"
    if {"question", "context"} <= keys and isinstance(record["context"], str):
        return "squad"
    if {"question", "answer"} <= keys:
        return "ambigqa" if "ambig" in name.lower() else "nq_open"
    if "text" in keys and "question" not in keys:
        return "passages"
    return None


def detect_format(path: str | os.PathLike[str]) -> str:
    """Format name of one local file, from its first record's keys (and its file name for look-alikes)."""
    path = Path(path)
    line, record = first_record(path)
    fmt = guess_format(record, path.name)
    if fmt is None:
        keys = sorted(record) if isinstance(record, dict) else type(record).__name__
        known = ", ".join(QA_FORMATS + CORPUS_FORMATS)
        raise DataFormatError(
            path, line, f"cannot detect the format from {keys}; pass format= one of {known}"
        )
    return fmt


def iter_qa(path: PathSpec, format: str = "auto", source: str | None = None) -> Iterator[dict[str, Any]]:
    """Stream canonical QA records (dicts of `QA_FEATURES`) from local file(s): a path, list, glob or folder."""
    return _iter_plan(_plan(path, format, _QA), source)


def iter_corpus(path: PathSpec, format: str = "auto") -> Iterator[dict[str, str]]:
    """Stream canonical passages (dicts of `PASSAGE_FEATURES`) from local file(s): a path, list, glob or folder."""
    return _iter_plan(_plan(path, format, _CORPUS), None)


def load_qa(
    path: PathSpec,
    format: str = "auto",
    split: str | None = None,
    source: str | None = None,
    cache_dir: str | None = None,
) -> datasets.Dataset:
    """Load QA examples (`QA_FEATURES`) from local file(s) or `hf://org/name[:config][@split]`.

    `split` names the Hub split to load (locally: the Dataset's split name, default "train"); `source`
    overrides the `source` column (default: the format's dataset name).
    """
    if _is_hub(path):
        return _load_hub(str(path), format, split, source, _QA)
    if _is_saved(path):
        return _load_saved(Path(path), _QA)
    return _build(_plan(path, format, _QA), _QA, split, source, cache_dir)


def load_corpus(
    path: PathSpec, format: str = "auto", split: str | None = None, cache_dir: str | None = None
) -> datasets.Dataset:
    """Load passages (`PASSAGE_FEATURES`) from local file(s) (path, list, glob or folder) or the Hub."""
    if _is_hub(path):
        return _load_hub(str(path), format, split, None, _CORPUS)
    if _is_saved(path):
        return _load_saved(Path(path), _CORPUS)
    return _build(_plan(path, format, _CORPUS), _CORPUS, split, None, cache_dir)


def summarize(ds: datasets.Dataset) -> dict[str, Any]:
    """Counts for a QA dataset (records, passages, records with answers/passages/graded relevance/gold ids/
    sub-questions, per source) or for a corpus (passages, with a title)."""
    counts: Counter[str] = Counter()
    sources: Counter[str] = Counter()
    for batch in ds.with_format("arrow").iter(batch_size=10_000):
        if "passages" not in batch.column_names:
            counts["passages"] += batch.num_rows
            counts["with_title"] += _count(pc.greater(pc.utf8_length(_column(batch, "title")), 0))
            continue
        passages = _column(batch, "passages")
        relevance = pc.struct_field(pc.list_flatten(passages), "relevance")
        graded_rows = pc.filter(pc.list_parent_indices(passages), pc.greater_equal(relevance, 0))
        counts["records"] += batch.num_rows
        counts["passages"] += pc.sum(pc.list_value_length(passages)).as_py() or 0
        counts["with_relevance"] += len(pc.unique(graded_rows))
        for column in ("answers", "passages", "gold_passage_ids", "sub_questions"):
            counts[f"with_{column}"] += _count(pc.greater(pc.list_value_length(_column(batch, column)), 0))
        sources.update(_column(batch, "source").to_pylist())
    return dict(counts, sources=dict(sources)) if sources else dict(counts)


def _column(batch: pa.Table, name: str) -> pa.Array:
    return batch.column(name).combine_chunks()


def _count(mask: pa.Array) -> int:
    return pc.sum(mask).as_py() or 0


def _is_hub(path: PathSpec) -> bool:
    return isinstance(path, str) and path.startswith("hf://")


def _is_saved(path: PathSpec) -> bool:
    """A `Dataset.save_to_disk` folder (the synthetic world's hf/questions, hf/corpus)."""
    return isinstance(path, str | os.PathLike) and (Path(path).expanduser() / "dataset_info.json").is_file()


def _load_saved(folder: Path, kind: _Kind) -> datasets.Dataset:
    """A saved canonical Dataset, checked to carry the kind's columns."""
    ds = datasets.load_from_disk(str(folder.expanduser()))
    if not isinstance(ds, datasets.Dataset):
        raise DataFormatError(folder, None, "is a saved DatasetDict; pass one of its split folders")
    missing = sorted(set(kind.features) - set(ds.column_names))
    if missing:
        raise DataFormatError(
            folder, None, f"saved dataset lacks the {kind.name} columns {missing}: use {kind.other}"
        )
    return ds


def _resolve(path: PathSpec) -> list[Path]:
    """Files named by a path, a folder (its .json/.jsonl files), a glob, or a sequence of those."""
    items = [path] if isinstance(path, str | os.PathLike) else list(path)
    files: list[Path] = []
    for item in items:
        candidate = Path(item).expanduser()
        if (candidate / "dataset_info.json").is_file():
            raise DataFormatError(
                candidate, None, "is a save_to_disk folder: load it with load_qa/load_corpus"
            )
        if candidate.is_dir():
            found = sorted(
                p for p in candidate.iterdir() if p.is_file() and p.suffix.lower() in DATA_SUFFIXES
            )
        elif candidate.is_file():
            found = [candidate]
        elif any(c in str(item) for c in "*?["):
            found = sorted(p for p in map(Path, glob.glob(str(candidate))) if p.is_file())
        else:
            raise FileNotFoundError(f"no such data file: {item}")
        if not found:
            raise FileNotFoundError(f"no data files match {item}")
        files += [p.resolve() for p in found]
    if not files:
        raise FileNotFoundError("no data files given")
    return files


def _plan(path: PathSpec, format: str, kind: _Kind) -> list[tuple[Path, str]]:
    """(file, format) pairs; each file's format detected when `format="auto"`."""
    if format != "auto" and format not in kind.converters:
        hint = f" (a format for {kind.other})" if format in QA_FORMATS + CORPUS_FORMATS else ""
        raise ValueError(
            f"unknown {kind.name} format {format!r}{hint}; expected 'auto' or one of {list(kind.converters)}"
        )
    plan = []
    for file in _resolve(path):
        fmt = detect_format(file) if format == "auto" else format
        if fmt not in kind.converters:
            raise DataFormatError(
                file, None, f"looks like {fmt!r}, not a {kind.name} format: use {kind.other}"
            )
        plan.append((file, fmt))
    return plan


def _iter_plan(plan: list[tuple[Path, str]], source: str | None) -> Iterator[dict[str, Any]]:
    for file, fmt in plan:
        yield from _iter_file(file, fmt, source)


def _iter_file(path: Path, fmt: str, source: str | None) -> Iterator[dict[str, Any]]:
    """Convert every record of one file; `RecordError` becomes `DataFormatError` at the record's line."""
    convert = (QA_CONVERTERS | CORPUS_CONVERTERS)[fmt]
    ctx = RecordContext(prefix=path.stem, source=source or DEFAULT_SOURCES.get(fmt, fmt))
    layout = detect_layout(path)
    index = -1
    for index, (line, raw) in enumerate(iter_json_records(path, layout)):
        try:
            record = convert(raw, index, ctx)
        except RecordError as e:
            raise DataFormatError(
                path, line, str(e) if layout == "jsonl" else f"record {index}: {e}"
            ) from None
        yield record
    if index < 0:
        raise DataFormatError(path, None, "no records (empty file)")


def _generate(
    files: tuple[tuple[str, str, int, int], ...], source: str | None, version: int
) -> Iterator[dict]:
    """`Dataset.from_generator` body; size, mtime and `version` only key the cache."""
    del version
    for path, fmt, _size, _mtime in files:
        yield from _iter_file(Path(path), fmt, source)


def _build(
    plan: list[tuple[Path, str]], kind: _Kind, split: str | None, source: str | None, cache_dir: str | None
) -> datasets.Dataset:
    # tuples, not lists: from_generator would shard list-valued gen_kwargs
    files = tuple((str(p), fmt, p.stat().st_size, p.stat().st_mtime_ns) for p, fmt in plan)
    try:
        return datasets.Dataset.from_generator(
            _generate,
            features=kind.features,
            gen_kwargs={"files": files, "source": source, "version": _CACHE_VERSION},
            split=datasets.NamedSplit(split or "train"),
            cache_dir=cache_dir,
        )
    except DatasetGenerationError as e:
        cause: BaseException | None = e
        while cause is not None and not isinstance(cause, DataFormatError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise cause.with_traceback(None) from None


def _load_hub(uri: str, format: str, split: str | None, source: str | None, kind: _Kind) -> datasets.Dataset:
    """`datasets.load_dataset` on the Hub, each row mapped through the same converter as local files."""
    spec = parse_hub_uri(uri)
    split = split or spec.split
    rows = datasets.load_dataset(spec.repo, spec.config, split=split)
    if isinstance(rows, datasets.DatasetDict):
        if len(rows) != 1:
            raise ValueError(f"{uri}: choose a split with @split or split=, one of {sorted(rows)}")
        split, rows = next(iter(rows.items()))
    if len(rows) == 0:
        raise DataFormatError(uri, None, "no rows")
    fmt = guess_format(rows[0], spec.repo) if format == "auto" else format
    if fmt not in kind.converters:
        raise ValueError(
            f"{uri}: format {fmt!r} is not a {kind.name} format; pass format= one of {list(kind.converters)}"
        )
    ctx = RecordContext(
        prefix=f"{spec.name}-{str(split).split('[')[0]}", source=source or DEFAULT_SOURCES.get(fmt, fmt)
    )
    convert = functools.partial(_convert_row, convert=kind.converters[fmt], ctx=ctx, label=uri)
    return rows.map(convert, with_indices=True, remove_columns=rows.column_names, features=kind.features)


def _convert_row(row: dict[str, Any], index: int, convert: Converter, ctx: RecordContext, label: str) -> dict:
    try:
        return convert(dict(row), index, ctx)
    except RecordError as e:
        raise DataFormatError(label, None, f"row {index}: {e}") from None
