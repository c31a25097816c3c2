"""Retrieval: BM25 (bm25s) and dense (sentence-transformers + FAISS) indexes, a Search-R1-compatible server
and its client, all behind one protocol:

    search(queries: list[str], k: int) -> list[list[tuple[passage_id, score]]]   # best first
    get(ids: list[str]) -> list[{"id", "title", "text"}]

    from r3forge.retrieval import load_retriever
    retriever = load_retriever("indexes/wiki-bm25")          # kind read from index.json
    retriever.search(["who wrote Hamlet"], k=5)

Build indexes with `r3forge index build` (or `build_bm25_index` / `build_dense_index`), serve them with
`r3forge serve retriever`, query a server with `RetrieverClient`.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from r3forge.errors import ConfigError
from r3forge.retrieval.base import (
    Hit,
    IndexFormatError,
    IndexManifest,
    RetrievalError,
    Retriever,
    RetrieverUnavailableError,
    read_manifest,
)

if TYPE_CHECKING:
    from r3forge.retrieval.bm25 import BM25Config, BM25Retriever, BM25Tokenizer, build_bm25_index
    from r3forge.retrieval.client import RetrieverClient
    from r3forge.retrieval.dense import DenseConfig, DenseRetriever, build_dense_index

# Imported on first use, so `from r3forge.retrieval import RetrieverClient` does not pay for torch and
# sentence-transformers (seconds) in processes that only talk to a server.
_LAZY = {
    "BM25Config": "bm25",
    "BM25Retriever": "bm25",
    "BM25Tokenizer": "bm25",
    "build_bm25_index": "bm25",
    "DenseConfig": "dense",
    "DenseRetriever": "dense",
    "build_dense_index": "dense",
    "RetrieverClient": "client",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'r3forge.retrieval' has no attribute {name!r}")
    return getattr(importlib.import_module(f"r3forge.retrieval.{_LAZY[name]}"), name)


def load_retriever(
    folder: str | os.PathLike[str],
    backend: str = "auto",
    encoder: str | None = None,
    device: str | None = None,
    ef_search: int | None = None,
) -> BM25Retriever | DenseRetriever:
    """Load any saved index; its kind comes from `index.json`. `backend` applies to BM25, the rest to dense."""
    if read_manifest(folder).kind == "bm25":
        return __getattr__("BM25Retriever").load(folder, backend=backend)
    return __getattr__("DenseRetriever").load(folder, encoder=encoder, device=device, ef_search=ef_search)


def open_retriever(index: str, retriever_url: str) -> BM25Retriever | DenseRetriever | RetrieverClient:
    """A saved index folder (`r3forge index build`) or a running `r3forge serve retriever` URL, exactly one of
    them; close it with `getattr(retriever, "close", ...)` (a client holds a connection pool)."""
    if bool(index) == bool(retriever_url):
        raise ConfigError(
            f"retrieval needs exactly one of `index` (a folder) or `retriever_url`, got {index!r} and {retriever_url!r}"
        )
    if retriever_url:
        return __getattr__("RetrieverClient")(retriever_url)
    if not os.path.isdir(index):
        raise ConfigError(f"index: {index} is not a folder (build one with `r3forge index build`)")
    return load_retriever(index)


__all__ = [
    "BM25Config",
    "BM25Retriever",
    "BM25Tokenizer",
    "DenseConfig",
    "DenseRetriever",
    "Hit",
    "IndexFormatError",
    "IndexManifest",
    "RetrievalError",
    "Retriever",
    "RetrieverClient",
    "RetrieverUnavailableError",
    "build_bm25_index",
    "build_dense_index",
    "load_retriever",
    "open_retriever",
    "read_manifest",
]
