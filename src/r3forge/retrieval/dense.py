"""Dense retrieval: a sentence-transformers encoder + FAISS (flat inner product or HNSW).

    from r3forge.retrieval import DenseConfig, DenseRetriever, build_dense_index
    build_dense_index("../shared/data/wiki_paragraphs/*.jsonl", "indexes/wiki-minilm", DenseConfig())
    e5 = DenseConfig(encoder="intfloat/e5-base-v2", query_prefix="query: ", passage_prefix="passage: ")
    retriever = DenseRetriever.load("indexes/wiki-minilm")
    retriever.search(["who founded the band Tinted Windows"], k=10)   # [[("hp123", 0.71), ...]]

Passages are encoded chunk by chunk (progress bar) straight into `dense/embeddings.npy` (a float32 (N, D)
memory map), then added to the FAISS index; only one chunk of texts is in Python memory at a time. The
saved embeddings let another index type be built without encoding again (`embeddings_from`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import faiss
import numpy as np
from sentence_transformers import SentenceTransformer
from tqdm.auto import tqdm

from r3forge.data.loaders import PathSpec
from r3forge.models import resolve_model
from r3forge.retrieval.base import (
    PASSAGES_DIR,
    Fingerprint,
    Hit,
    IndexFormatError,
    IndexManifest,
    PassageStore,
    RetrievalError,
    check_request,
    iter_batches,
    open_corpus,
    passage_text,
    read_manifest,
    require_files,
    save_passages,
    staged_output,
    write_manifest,
)

DENSE_DIR = "dense"
FAISS_FILE = f"{DENSE_DIR}/faiss.index"
EMBEDDINGS_FILE = f"{DENSE_DIR}/embeddings.npy"
INDEX_TYPES = ("flat", "hnsw")


@dataclass
class DenseConfig:
    """How a dense index is built (saved in `index.json`; the encoder and prefixes are reused for queries)."""

    encoder: str = field(
        default="all-minilm-l6-v2",
        metadata={
            "help": "sentence-transformers encoder: embedded short name, local folder or Hub id.",
            "model": (),
        },
    )
    index_type: str = field(
        default="flat",
        metadata={
            "help": "FAISS index: exact inner product (flat) or HNSW graph.",
            "choices": list(INDEX_TYPES),
        },
    )
    query_prefix: str = field(default="", metadata={"help": "Prepended to every query (e5: 'query: ')."})
    passage_prefix: str = field(
        default="", metadata={"help": "Prepended to every passage (e5: 'passage: ')."}
    )
    normalize: bool = field(
        default=True, metadata={"help": "L2-normalize embeddings, so inner product is cosine similarity."}
    )
    batch_size: int = field(default=64, metadata={"help": "Encoder batch size (passages and queries)."})
    chunk_size: int = field(
        default=2048, metadata={"help": "Passages read, encoded and written to disk per step."}
    )
    max_seq_length: int | None = field(
        default=None, metadata={"help": "Truncate inputs to this many tokens (default: the encoder's)."}
    )
    hnsw_m: int = field(default=32, metadata={"help": "HNSW: neighbours per node (M)."})
    hnsw_ef_construction: int = field(default=200, metadata={"help": "HNSW: efConstruction at build."})
    hnsw_ef_search: int = field(default=128, metadata={"help": "HNSW: efSearch at query time (default)."})
    device: str | None = field(default=None, metadata={"help": "Encoder device (cpu, cuda); default: auto."})
    embeddings_from: str | None = field(
        default=None,
        metadata={
            "help": "An existing dense index folder over the same corpus, encoder and prefixes whose saved "
            "embeddings are reused instead of encoding again (e.g. to build HNSW from a flat index)."
        },
    )

    def __post_init__(self) -> None:
        if self.index_type not in INDEX_TYPES:
            raise RetrievalError(f"DenseConfig.index_type={self.index_type!r}; choose from {INDEX_TYPES}")
        for name in ("batch_size", "chunk_size", "hnsw_m", "hnsw_ef_construction", "hnsw_ef_search"):
            if getattr(self, name) < 1:
                raise RetrievalError(f"DenseConfig.{name} must be >= 1, got {getattr(self, name)}")


def load_encoder(
    name: str, device: str | None = None, max_seq_length: int | None = None
) -> SentenceTransformer:
    """A sentence-transformers encoder by embedded short name, local folder or Hub id."""
    try:
        model = SentenceTransformer(resolve_model(name), device=device)
    except (OSError, ValueError) as e:
        raise RetrievalError(f"cannot load encoder {name!r}: {e}") from e
    if max_seq_length:
        model.max_seq_length = max_seq_length
    return model


def embedding_dim(model: SentenceTransformer) -> int:
    # sentence-transformers 6 renamed get_sentence_embedding_dimension (still there, deprecated)
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(getter())


def encode(model: SentenceTransformer, texts: list[str], batch_size: int, normalize: bool) -> np.ndarray:
    """(len(texts), D) float32 embeddings."""
    emb = model.encode(
        texts,
        batch_size=batch_size,
        normalize_embeddings=normalize,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return np.ascontiguousarray(emb, dtype=np.float32)


def new_faiss_index(dim: int, config: DenseConfig) -> faiss.Index:
    if config.index_type == "flat":
        return faiss.IndexFlatIP(dim)
    index = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = config.hnsw_ef_construction
    index.hnsw.efSearch = config.hnsw_ef_search
    return index


def _write_embeddings(
    ds: datasets.Dataset, config: DenseConfig, path: Path, fingerprint: Fingerprint, show_progress: bool
) -> np.ndarray:
    """Encode every passage into a (N, D) float32 .npy memory map at `path`."""
    model = load_encoder(config.encoder, config.device, config.max_seq_length)
    dim = embedding_dim(model)
    emb = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(len(ds), dim))  # (N, D)
    bar = tqdm(total=len(ds), desc="Encode passages", unit="passage", disable=not show_progress)
    start = 0
    for batch in iter_batches(ds, config.chunk_size):
        fingerprint.update(batch)
        texts = [
            config.passage_prefix + passage_text(t, x)
            for t, x in zip(batch["title"], batch["text"], strict=True)
        ]
        emb[start : start + len(texts)] = encode(model, texts, config.batch_size, config.normalize)
        start += len(texts)
        bar.update(len(texts))
    bar.close()
    emb.flush()
    return emb


def _reuse_embeddings(
    ds: datasets.Dataset, config: DenseConfig, path: Path, fingerprint: Fingerprint
) -> np.ndarray:
    """Copy `embeddings.npy` of `config.embeddings_from` after checking it matches this corpus and encoder."""
    source = Path(config.embeddings_from or "")
    manifest = read_manifest(source, kind="dense")
    require_files(source, [EMBEDDINGS_FILE])
    for batch in iter_batches(ds, config.chunk_size):
        fingerprint.update(batch)
    theirs = manifest.params
    checks = {
        "corpus fingerprint": (manifest.corpus_fingerprint, fingerprint.hexdigest()),
        "encoder": (manifest.encoder, config.encoder),
        "passage_prefix": (manifest.passage_prefix, config.passage_prefix),
        "normalize": (theirs.get("normalize"), config.normalize),
        "max_seq_length": (theirs.get("max_seq_length"), config.max_seq_length),
    }
    wrong = [f"{what}: {a!r} there vs {b!r} here" for what, (a, b) in checks.items() if a != b]
    if wrong:
        raise RetrievalError(f"embeddings_from={source} does not match this build: {'; '.join(wrong)}")
    shutil.copyfile(source / EMBEDDINGS_FILE, path)
    return np.load(path, mmap_mode="r")


def build_dense_index(
    corpus: PathSpec | datasets.Dataset,
    output: str | os.PathLike[str],
    config: DenseConfig | None = None,
    corpus_format: str = "auto",
    overwrite: bool = False,
    show_progress: bool = True,
) -> Path:
    """Encode `corpus` (or reuse `config.embeddings_from`), build the FAISS index, save a self-contained folder."""
    config = config or DenseConfig()
    ds, corpus_path = open_corpus(corpus, corpus_format)
    fingerprint = Fingerprint()
    with staged_output(output, overwrite) as tmp:
        (tmp / DENSE_DIR).mkdir()
        if config.embeddings_from:
            emb = _reuse_embeddings(ds, config, tmp / EMBEDDINGS_FILE, fingerprint)
        else:
            emb = _write_embeddings(ds, config, tmp / EMBEDDINGS_FILE, fingerprint, show_progress)
        index = new_faiss_index(emb.shape[1], config)
        for start in tqdm(
            range(0, len(emb), config.chunk_size),
            desc=f"Add to {config.index_type}",
            disable=not show_progress,
        ):
            index.add(np.ascontiguousarray(emb[start : start + config.chunk_size]))
        faiss.write_index(index, str(tmp / FAISS_FILE))
        save_passages(ds, tmp)
        manifest = IndexManifest(
            kind="dense",
            count=len(ds),
            corpus_path=corpus_path,
            corpus_fingerprint=fingerprint.hexdigest(),
            params={**dataclasses.asdict(config), "dim": int(emb.shape[1])},
            encoder=config.encoder,
            query_prefix=config.query_prefix,
            passage_prefix=config.passage_prefix,
        )
        write_manifest(tmp, manifest)
        del emb
    return Path(output)


class DenseRetriever:
    """A loaded dense index: `search` (batched, top-k by inner product) and `get` (passages by id)."""

    def __init__(
        self,
        index: faiss.Index,
        encoder: SentenceTransformer,
        passages: PassageStore,
        manifest: IndexManifest,
    ):
        self.index = index
        self.encoder = encoder
        self.passages = passages
        self.manifest = manifest
        self.query_prefix = manifest.query_prefix
        self.batch_size = int(manifest.params.get("batch_size", 64))
        self.normalize = bool(manifest.params.get("normalize", True))

    @classmethod
    def load(
        cls,
        folder: str | os.PathLike[str],
        encoder: str | None = None,
        device: str | None = None,
        ef_search: int | None = None,
    ) -> DenseRetriever:
        """Load a saved index. `encoder` overrides the manifest's (e.g. the model moved to another
        folder); `ef_search` overrides HNSW efSearch (recall vs speed)."""
        folder = Path(folder)
        manifest = read_manifest(folder, kind="dense")
        require_files(folder, [PASSAGES_DIR, FAISS_FILE])
        index = faiss.read_index(str(folder / FAISS_FILE))
        if ef_search is not None and hasattr(index, "hnsw"):
            index.hnsw.efSearch = ef_search
        passages = PassageStore(folder / PASSAGES_DIR)
        if index.ntotal != manifest.count or len(passages) != manifest.count:
            raise IndexFormatError(
                f"{folder}: manifest count {manifest.count} != {index.ntotal} vectors / {len(passages)} passages"
            )
        model = load_encoder(encoder or manifest.encoder or "", device, manifest.params.get("max_seq_length"))
        if embedding_dim(model) != index.d:
            raise IndexFormatError(
                f"{folder}: encoder {encoder or manifest.encoder!r} gives {embedding_dim(model)}"
                f"-d embeddings but the index holds {index.d}-d vectors"
            )
        return cls(index, model, passages, manifest)

    def __len__(self) -> int:
        return self.manifest.count

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        """(len(queries), D) float32 query embeddings, `query_prefix` prepended."""
        texts = [self.query_prefix + q for q in queries]
        return encode(self.encoder, texts, self.batch_size, self.normalize)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Top-k (passage_id, score = inner product) per query, best first."""
        check_request(queries, k)
        if not queries:
            return []
        scores, rows = self.index.search(self.encode_queries(list(queries)), min(k, len(self)))  # (Q, k) each
        keep = rows >= 0  # HNSW may return fewer than k (-1 rows)
        ids = self.passages.ids(rows[keep].tolist())
        results, pos = [], 0
        for row_keep, row_scores in zip(keep, scores, strict=True):
            n = int(row_keep.sum())
            results.append(
                list(zip(ids[pos : pos + n], row_scores[row_keep].astype(float).tolist(), strict=True))
            )
            pos += n
        return results

    def get(self, ids: list[str]) -> list[dict[str, str]]:
        return self.passages.get(ids)
