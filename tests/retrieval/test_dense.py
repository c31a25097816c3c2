"""Dense retrieval with the embedded MiniLM: flat is exact, HNSW agrees with flat, prefixes, save/load, errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from r3forge.cli import run_command
from r3forge.data.loaders import load_corpus, load_qa
from r3forge.retrieval import (
    BM25Retriever,
    DenseConfig,
    DenseRetriever,
    IndexFormatError,
    RetrievalError,
    Retriever,
    build_bm25_index,
    build_dense_index,
    load_retriever,
    read_manifest,
)
from r3forge.retrieval.base import passage_text
from r3forge.retrieval.dense import EMBEDDINGS_FILE

WIKI_GLOB = "wiki_paragraphs/hotpot_dev_distractor_paragraphs.part0*.jsonl"
N_PASSAGES = 300  # encoding is the cost: ~300 MiniLM passages take ~5-15 s on 2 busy cores
MAX_LEN = 128
ENCODER = "all-minilm-l6-v2"


@pytest.fixture(scope="module")
def wiki(shared_data: Path) -> datasets.Dataset:
    return load_corpus(str(shared_data / WIKI_GLOB))


@pytest.fixture(scope="module")
def questions(shared_data: Path) -> list[str]:
    return load_qa(shared_data / "hotpotqa/rpt_distractor_dev_sample_dev.jsonl")["question"][:40]


@pytest.fixture(scope="module")
def encoder(minilm_path: Path) -> SentenceTransformer:
    model = SentenceTransformer(str(minilm_path), device="cpu")
    model.max_seq_length = MAX_LEN
    return model


@pytest.fixture(scope="module")
def flat_index(wiki: datasets.Dataset, minilm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = DenseConfig(encoder=ENCODER, max_seq_length=MAX_LEN, chunk_size=128, device="cpu")
    out = tmp_path_factory.mktemp("dense") / "flat"
    return build_dense_index(wiki.select(range(N_PASSAGES)), out, config, show_progress=False)


@pytest.fixture(scope="module")
def flat(flat_index: Path) -> DenseRetriever:
    return DenseRetriever.load(flat_index, device="cpu")


def _reuse(flat_index: Path, **changes) -> DenseConfig:
    return DenseConfig(encoder=ENCODER, max_seq_length=MAX_LEN, embeddings_from=str(flat_index), **changes)


def test_saved_embeddings_are_the_encoders(
    flat_index: Path, wiki: datasets.Dataset, encoder: SentenceTransformer, fp32
):
    emb = np.load(flat_index / EMBEDDINGS_FILE)  # (N, 384)
    assert emb.shape == (N_PASSAGES, 384) and emb.dtype == np.float32
    # unit vectors: normalizing and measuring the norm again each sum 384 squares in fp32, 2·sqrt(384)·u
    # (~2e-6); an unnormalized vector is off by its norm's distance from 1 (MiniLM's: ~1 to 10)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=fp32.atol(1.0, 384))
    rows = wiki.select([0, 7, N_PASSAGES - 1])
    expected = encoder.encode([passage_text(r["title"], r["text"]) for r in rows], normalize_embeddings=True)
    # components of unit vectors from two fp32 forwards that sum in other orders (chunks of 128 vs 3
    # texts, other padding): 2·sqrt(L·k)·u (~1e-5); another passage or pooling moves them by > 1e-2
    atol = fp32.atol(1.0, fp32.forward_length(encoder[0].auto_model.config))
    np.testing.assert_allclose(emb[[0, 7, N_PASSAGES - 1]], expected, atol=atol, rtol=0)
    manifest = read_manifest(flat_index, kind="dense")
    assert (manifest.encoder, manifest.count, manifest.params["dim"]) == (ENCODER, N_PASSAGES, 384)
    assert manifest.params["index_type"] == "flat"


def test_flat_search_is_exact(flat: DenseRetriever, flat_index: Path, wiki: datasets.Dataset, fp32):
    assert isinstance(flat, Retriever)
    rows = wiki.select(range(0, N_PASSAGES, 15))
    hits = flat.search([passage_text(r["title"], r["text"]) for r in rows], k=5)
    assert [h[0][0] for h in hits] == rows["id"]  # every passage finds itself first
    # the scores are the brute-force inner products with the saved embeddings
    queries = ["Which band released Tinted Windows?", "anthroposophy world center"]
    emb = np.load(flat_index / EMBEDDINGS_FILE)
    brute = flat.encode_queries(queries) @ emb.T  # (2, N)
    ids = wiki.select(range(N_PASSAGES))["id"]
    for row, got in zip(brute, flat.search(queries, 10), strict=True):
        top = np.argsort(-row)[:10]
        assert [pid for pid, _ in got] == [ids[i] for i in top]
        # inner products of unit vectors (384 terms of total magnitude <= 1), faiss's order vs numpy's:
        # 2·sqrt(384)·u (~2e-6); the score of another passage or an unnormalized query is off by > 1e-2
        np.testing.assert_allclose([s for _, s in got], row[top], atol=fp32.atol(1.0, 384), rtol=0)
    assert flat.get(["hp3"])[0]["title"] == "Tinted Windows (album)"
    assert len(flat.search(["music"], 10_000)[0]) == N_PASSAGES


def test_hnsw_agrees_with_flat(flat: DenseRetriever, flat_index: Path, tmp_path: Path, questions: list[str]):
    config = _reuse(flat_index, index_type="hnsw", hnsw_m=16, hnsw_ef_construction=100, hnsw_ef_search=64)
    hnsw = DenseRetriever.load(
        build_dense_index(flat.passages.dataset, tmp_path / "hnsw", config, show_progress=False)
    )
    assert read_manifest(tmp_path / "hnsw").params["index_type"] == "hnsw" and hnsw.index.hnsw.efSearch == 64
    exact, approx = flat.search(questions, 10), hnsw.search(questions, 10)
    overlap = np.mean(
        [len({p for p, _ in a} & {p for p, _ in e}) / 10 for a, e in zip(approx, exact, strict=True)]
    )
    assert overlap >= 0.9, overlap
    assert DenseRetriever.load(tmp_path / "hnsw", ef_search=300).index.hnsw.efSearch == 300


def test_query_prefix_is_applied(
    flat_index: Path, flat: DenseRetriever, tmp_path: Path, encoder: SentenceTransformer, fp32
):
    out = build_dense_index(
        flat.passages.dataset, tmp_path / "e5", _reuse(flat_index, query_prefix="query: ")
    )
    prefixed = load_retriever(out)
    assert read_manifest(out).query_prefix == "query: " and flat.query_prefix == ""
    query = "who founded the band"
    got = prefixed.encode_queries([query])[0]
    want = encoder.encode("query: " + query, normalize_embeddings=True)
    # a unit vector from two fp32 forwards of one text: 2·sqrt(L·k)·u (~1e-5), as above
    atol = fp32.atol(1.0, fp32.forward_length(encoder[0].auto_model.config))
    np.testing.assert_allclose(got, want, atol=atol, rtol=0)
    assert not np.allclose(got, flat.encode_queries([query])[0], atol=1e-3)  # the prefix moves it by far more


def test_embeddings_from_must_match(flat_index: Path, wiki: datasets.Dataset, tmp_path: Path):
    with pytest.raises(RetrievalError, match="passage_prefix: '' there vs 'passage: ' here"):
        build_dense_index(
            wiki.select(range(N_PASSAGES)), tmp_path / "x", _reuse(flat_index, passage_prefix="passage: ")
        )
    with pytest.raises(RetrievalError, match="corpus fingerprint"):
        build_dense_index(wiki.select(range(1, N_PASSAGES + 1)), tmp_path / "y", _reuse(flat_index))
    assert not list(tmp_path.iterdir())  # nothing half-built is left behind


def test_round_trip_copy(flat_index: Path, flat: DenseRetriever, tmp_path: Path, questions: list[str]):
    moved = DenseRetriever.load(shutil.copytree(flat_index, tmp_path / "moved"))
    assert moved.search(questions[:5], 7) == flat.search(questions[:5], 7)


def test_load_errors(flat_index: Path, tmp_path: Path, wiki: datasets.Dataset):
    bm25 = build_bm25_index(wiki.select(range(50)), tmp_path / "bm25", show_progress=False)
    with pytest.raises(IndexFormatError, match="is a 'bm25' index, not 'dense'"):
        DenseRetriever.load(bm25)
    assert isinstance(load_retriever(bm25, backend="numpy"), BM25Retriever)
    broken = Path(shutil.copytree(flat_index, tmp_path / "broken"))
    (broken / "dense" / "faiss.index").unlink()
    with pytest.raises(IndexFormatError, match=r"missing \['dense/faiss.index'\]"):
        DenseRetriever.load(broken)
    (broken / "index.json").write_text(json.dumps({"kind": "dense"}))
    with pytest.raises(IndexFormatError, match="unreadable manifest"):
        DenseRetriever.load(broken)


def test_cli_builds_hnsw_from_saved_embeddings(flat_index: Path, tmp_path: Path, shared_data: Path):
    # the CLI reads the corpus from files: write the same 300 passages as JSON lines
    corpus = tmp_path / "subset.jsonl"
    DenseRetriever.load(flat_index).passages.dataset.to_json(corpus, lines=True)
    out = tmp_path / "cli-hnsw"
    argv = ["build", "--corpus", str(corpus), "--kind", "dense", "--index_type", "hnsw", "--output", str(out)]
    argv += ["--max_seq_length", str(MAX_LEN), "--embeddings_from", str(flat_index)]
    assert run_command("index", argv) == 0
    assert read_manifest(out).params["hnsw_m"] == 32 and read_manifest(out).corpus_path == str(corpus)


@pytest.mark.slow
def test_hnsw_agrees_with_flat_on_2000_passages(wiki: datasets.Dataset, minilm_path: Path, tmp_path: Path):
    subset = wiki.select(range(2000))
    flat_out = build_dense_index(subset, tmp_path / "flat", DenseConfig(encoder=ENCODER), show_progress=False)
    hnsw_out = build_dense_index(
        subset,
        tmp_path / "hnsw",
        DenseConfig(encoder=ENCODER, index_type="hnsw", embeddings_from=str(flat_out)),
    )
    queries = [r["title"] for r in subset.select(range(0, 2000, 20))]
    exact, approx = (
        DenseRetriever.load(flat_out).search(queries, 10),
        DenseRetriever.load(hnsw_out).search(queries, 10),
    )
    overlap = np.mean(
        [len({p for p, _ in a} & {p for p, _ in e}) / 10 for a, e in zip(approx, exact, strict=True)]
    )
    assert overlap >= 0.95, overlap
