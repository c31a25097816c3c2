"""What every retriever shares: the `Retriever` protocol, errors, the `index.json` manifest and the passage store.

A saved index is one self-contained folder:

    <index>/index.json     manifest: kind, encoder, prefixes, corpus path + fingerprint, count, build params
    <index>/passages/      the passages (id, title, text) as a `datasets` Arrow folder, row i = index entry i
    <index>/bm25/ | dense/ the kind's own files (bm25s arrays; FAISS index + embeddings.npy)

Builds write into a temporary sibling folder that is renamed into place only when complete.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import datasets
import pyarrow as pa
import pyarrow.compute as pc

from r3forge import __version__
from r3forge.data.loaders import PathSpec, load_corpus
from r3forge.data.records import PASSAGE_FEATURES, flashrag_contents
from r3forge.errors import R3ForgeError

Hit = tuple[str, float]  # (passage_id, score), best first
MANIFEST_NAME = "index.json"
PASSAGES_DIR = "passages"
FORMAT_VERSION = 1
KINDS = ("bm25", "dense")


class RetrievalError(R3ForgeError, ValueError):
    """A retrieval request or index is invalid: the message names what and where."""


class IndexFormatError(RetrievalError):
    """A saved index folder is missing files, has a bad manifest or is of another kind."""


class RetrieverUnavailableError(R3ForgeError, ConnectionError):
    """A retriever server did not answer within the client's retry budget."""

    def __init__(self, message: str, attempts: int):
        self.attempts = attempts
        super().__init__(message)


@runtime_checkable
class Retriever(Protocol):
    """Anything that ranks passages for queries: `BM25Retriever`, `DenseRetriever`, `RetrieverClient`."""

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Top-`k` (passage_id, score) per query, best first (fewer when fewer passages match)."""
        ...

    def get(self, ids: list[str]) -> list[dict[str, str]]:
        """Passages {id, title, text} for `ids`, in order; an unknown id raises `KeyError`."""
        ...


def check_request(queries: Sequence[str], k: int, max_k: int | None = None) -> None:
    """Validate a search call: a list of strings and 1 <= k (<= max_k)."""
    if isinstance(queries, str) or not isinstance(queries, Sequence):
        raise RetrievalError(f"queries must be a list of strings, got {type(queries).__name__}")
    bad = next((i for i, q in enumerate(queries) if not isinstance(q, str)), None)
    if bad is not None:
        raise RetrievalError(f"queries[{bad}] must be a string, got {type(queries[bad]).__name__}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise RetrievalError(f"k must be a positive int, got {k!r}")
    if max_k is not None and k > max_k:
        raise RetrievalError(f"k={k} is larger than the maximum {max_k}")


def passage_text(title: str, text: str) -> str:
    """The string that is indexed for a passage: FlashRAG `contents` ('"Title"\\ntext'), or the text alone."""
    return flashrag_contents(title, text) if title else text


# ----------------------------------------------------------------------------------------------- manifest


@dataclass
class IndexManifest:
    """Contents of `index.json`."""

    kind: str  # "bm25" | "dense"
    count: int  # number of passages (= index entries)
    corpus_path: str | None  # what the index was built from (None for an in-memory Dataset)
    corpus_fingerprint: str  # sha256 over every (id, title, text), in order
    params: dict[str, Any] = field(default_factory=dict)  # the build config of the kind
    encoder: str | None = None  # dense only: the sentence-transformers model it was built with
    query_prefix: str = ""
    passage_prefix: str = ""
    r3forge_version: str = __version__
    format_version: int = FORMAT_VERSION
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def write_manifest(folder: Path, manifest: IndexManifest) -> None:
    path = Path(folder) / MANIFEST_NAME
    path.write_text(json.dumps(dataclasses.asdict(manifest), indent=2, ensure_ascii=False) + "\n")


def read_manifest(folder: str | os.PathLike[str], kind: str | None = None) -> IndexManifest:
    """Read and check `<folder>/index.json`; `kind` (if given) must match. Errors name the folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise IndexFormatError(f"{folder}: no such index folder")
    path = folder / MANIFEST_NAME
    if not path.is_file():
        raise IndexFormatError(f"{path}: missing; {folder} is not an index built by `r3forge index build`")
    try:
        data = json.loads(path.read_text())
        manifest = IndexManifest(**data)
    except (ValueError, TypeError) as e:
        raise IndexFormatError(f"{path}: unreadable manifest ({e})") from e
    if manifest.format_version > FORMAT_VERSION:
        raise IndexFormatError(
            f"{path}: format_version {manifest.format_version} is newer than this r3forge "
            f"({__version__}) reads ({FORMAT_VERSION}); upgrade r3forge"
        )
    if manifest.kind not in KINDS:
        raise IndexFormatError(f"{path}: unknown kind {manifest.kind!r}; expected one of {KINDS}")
    if kind is not None and manifest.kind != kind:
        raise IndexFormatError(
            f"{folder} is a '{manifest.kind}' index, not '{kind}' (use r3forge.retrieval.load_retriever)"
        )
    return manifest


def require_files(folder: Path, names: Sequence[str]) -> None:
    missing = [n for n in names if not (folder / n).exists()]
    if missing:
        raise IndexFormatError(f"{folder}: incomplete index, missing {missing}")


@contextlib.contextmanager
def staged_output(output: str | os.PathLike[str], overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling folder that replaces `output` once the block succeeds.

    An existing `output` must be an empty folder, or an index folder (has index.json) with `overwrite`:
    anything else is never deleted.
    """
    output = Path(output)
    if output.is_file() or (output.is_dir() and any(output.iterdir())):
        if not (output / MANIFEST_NAME).is_file():
            raise RetrievalError(f"{output} exists and is not an index folder; choose another output")
        if not overwrite:
            raise RetrievalError(f"{output} already exists; pass overwrite=True (--overwrite) to replace it")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=output.parent, prefix=f".tmp-{output.name}-"))
    try:
        yield tmp
        if output.exists():
            shutil.rmtree(output)
        os.replace(tmp, output)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ corpus


def open_corpus(
    corpus: PathSpec | datasets.Dataset, format: str = "auto"
) -> tuple[datasets.Dataset, str | None]:
    """A corpus as a `datasets.Dataset` of passages (Arrow, memory-mapped) and its path for the manifest.

    Paths (file, glob, folder, list) stream through `load_corpus`; a Dataset must have id/title/text string
    columns. Raises `RetrievalError` for an empty corpus or duplicate ids.
    """
    if isinstance(corpus, datasets.Dataset):
        missing = [c for c in ("id", "title", "text") if c not in corpus.column_names]
        if missing:
            raise RetrievalError(f"corpus Dataset lacks column(s) {missing}; has {corpus.column_names}")
        ds, where = corpus.select_columns(["id", "title", "text"]), None
        if ds.features != PASSAGE_FEATURES:
            ds = ds.cast(PASSAGE_FEATURES)
    else:
        ds = load_corpus(corpus, format=format)
        where = corpus if isinstance(corpus, str | os.PathLike) else ",".join(map(str, corpus))
        where = str(where)
    if len(ds) == 0:
        raise RetrievalError(f"corpus {where or '(Dataset)'} has no passages: nothing to index")
    ids = ds.with_format("arrow")["id"]  # honours a select/shuffle indices map
    if pc.count_distinct(ids).as_py() != len(ds):
        counts = pc.value_counts(ids)
        dupes = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))[:5].to_pylist()
        raise RetrievalError(f"corpus {where or '(Dataset)'} has duplicate passage ids, e.g. {dupes}")
    return ds, where


class Fingerprint:
    """sha256 over (id, title, text) of every passage, fed batch by batch while a builder reads the corpus."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def update(self, batch: dict[str, list[str]]) -> None:
        for row in zip(batch["id"], batch["title"], batch["text"], strict=True):
            self._hash.update("\x1f".join(row).encode() + b"\x1e")

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


class PassageStore:
    """The `passages/` Arrow folder of an index: row lookup for search results, id lookup for `get`."""

    def __init__(self, folder: str | os.PathLike[str]):
        folder = Path(folder)
        try:
            self.dataset = datasets.load_from_disk(str(folder))
        except FileNotFoundError as e:
            raise IndexFormatError(f"{folder}: missing or unreadable passages folder ({e})") from e
        self._table: pa.Table = self.dataset.data.table  # memory-mapped; saved folders have no indices map
        self._row_of: dict[str, int] | None = None  # id -> row, built on first `get`
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.dataset.num_rows

    def ids(self, rows: Sequence[int]) -> list[str]:
        return self._table.column("id").take(pa.array(rows, type=pa.int64())).to_pylist()

    def rows(self, rows: Sequence[int]) -> list[dict[str, str]]:
        """Passages {id, title, text} at row positions `rows`, in order."""
        return self._table.take(pa.array(rows, type=pa.int64())).to_pylist()

    def get(self, ids: Sequence[str]) -> list[dict[str, str]]:
        """Passages by id, in order; an unknown id raises `KeyError` naming it."""
        if self._row_of is None:
            with self._lock:
                if self._row_of is None:
                    column = self._table.column("id").to_pylist()
                    self._row_of = {pid: i for i, pid in enumerate(column)}
        missing = [pid for pid in ids if pid not in self._row_of]
        if missing:
            raise KeyError(f"unknown passage id(s) {missing[:5]} ({len(missing)} of {len(ids)})")
        return self.rows([self._row_of[pid] for pid in ids])


def save_passages(ds: datasets.Dataset, folder: Path) -> None:
    ds.save_to_disk(str(folder / PASSAGES_DIR))


def iter_batches(ds: datasets.Dataset, batch_size: int) -> Iterator[dict[str, list[str]]]:
    """The corpus in batches of columns {id, title, text} (one batch in Python memory at a time)."""
    yield from ds.iter(batch_size=batch_size)
