"""Recall@k of BM25 and dense (MiniLM, flat) on the HotpotQA slices, over the pooled 14,835-paragraph corpus.

    .venv/bin/python tests/benchmarks/bench_retrieval_quality.py [--data ../shared/data] [--work_dir DIR]

Every question of hotpotqa/rpt_distractor_dev_sample_{train,dev,test} has two gold paragraphs; their
(title, text) equal wiki_paragraphs passages exactly, which gives the gold corpus ids. Recall@k = gold
paragraphs in the top k / 2 (trec_eval convention, `r3forge.metrics.recall_batch`), averaged over questions.
Indexes are built into --work_dir once and reused (encoding the corpus with MiniLM takes minutes on 2 CPU
cores); --rebuild forces a rebuild.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import datasets
import numpy as np

from r3forge.data.loaders import load_corpus, load_qa
from r3forge.metrics import recall_batch
from r3forge.retrieval import (
    BM25Config,
    DenseConfig,
    RetrievalError,
    Retriever,
    build_bm25_index,
    build_dense_index,
    load_retriever,
    read_manifest,
)

REPO = Path(__file__).resolve().parents[2]
WIKI_GLOB = "wiki_paragraphs/hotpot_dev_distractor_paragraphs.part0*.jsonl"
SLICES = ("train", "dev", "test")
KS = (2, 5, 10, 20)


def gold_ids(qa: datasets.Dataset, corpus_id: dict[tuple[str, str], str]) -> list[dict[str, int]]:
    """Per question, {corpus id: 1} for its gold paragraphs (relevance > 0)."""
    return [
        {corpus_id[(p["title"], p["text"])]: 1 for p in ex["passages"] if p["relevance"] > 0} for ex in qa
    ]


def ensure_index(kind: str, corpus: datasets.Dataset, out: Path, rebuild: bool) -> tuple[Path, float | None]:
    """Build `out` unless a matching index is there; returns the folder and build seconds (None if reused)."""
    if out.exists() and not rebuild:
        try:
            if read_manifest(out, kind).count == len(corpus):
                return out, None
        except RetrievalError:
            pass
    start = time.perf_counter()
    if kind == "bm25":
        build_bm25_index(corpus, out, BM25Config(), overwrite=True)
    else:
        build_dense_index(corpus, out, DenseConfig(encoder="all-minilm-l6-v2"), overwrite=True)
    return out, time.perf_counter() - start


def evaluate(retriever: Retriever, questions: list[str], qrels: list[dict[str, int]]) -> dict[int, float]:
    hits = retriever.search(questions, max(KS))
    rankings = [[pid for pid, _ in row] for row in hits]
    return {k: float(np.mean(recall_batch(rankings, qrels, k))) for k in KS}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", default=os.environ.get("R3FORGE_SHARED_DATA", str(REPO.parent / "shared" / "data"))
    )
    parser.add_argument("--work_dir", default="/tmp/r3forge-bench-quality")
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    data, work = Path(args.data), Path(args.work_dir)

    corpus = load_corpus(str(data / WIKI_GLOB))
    corpus_id = {(t, x): i for i, t, x in zip(corpus["id"], corpus["title"], corpus["text"], strict=True)}
    slices = {s: load_qa(data / f"hotpotqa/rpt_distractor_dev_sample_{s}.jsonl") for s in SLICES}
    questions = {s: qa["question"] for s, qa in slices.items()}
    qrels = {s: gold_ids(qa, corpus_id) for s, qa in slices.items()}
    questions["all"] = [q for s in SLICES for q in questions[s]]
    qrels["all"] = [g for s in SLICES for g in qrels[s]]
    print(
        f"corpus {len(corpus)} passages; questions "
        + ", ".join(f"{s} {len(questions[s])}" for s in questions)
    )

    results: dict[str, dict[str, dict[int, float]]] = {}
    for kind, name in (
        ("bm25", "BM25 (bm25s lucene, k1=1.5 b=0.75, english stem)"),
        ("dense", "dense MiniLM-L6 flat IP"),
    ):
        folder, seconds = ensure_index(kind, corpus, work / f"wiki-{kind}", args.rebuild)
        built = f"built in {seconds:.0f}s" if seconds is not None else "reused"
        retriever = load_retriever(folder, backend="numpy")
        start = time.perf_counter()
        results[name] = {s: evaluate(retriever, questions[s], qrels[s]) for s in questions}
        print(
            f"{name}: index {built}; {len(questions['all'])} queries searched in {time.perf_counter() - start:.1f}s"
        )

    print("\nRecall@k (gold paragraphs in top k / 2), baseline BM25 = 1.00x")
    header = f"{'retriever':<50} {'slice':<6}" + "".join(f"{'R@' + str(k):>8}" for k in KS)
    print(header)
    base = next(iter(results.values()))
    for name, per_slice in results.items():
        for s, recall in per_slice.items():
            print(f"{name:<50} {s:<6}" + "".join(f"{recall[k]:8.3f}" for k in KS))
    for name, per_slice in list(results.items())[1:]:
        ratios = "  ".join(f"R@{k} {per_slice['all'][k] / base['all'][k]:.2f}x" for k in KS)
        print(f"\n{name} vs BM25 (all questions): {ratios}")


if __name__ == "__main__":
    main()
