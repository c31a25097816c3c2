"""Recall@k of BM25 and dense (MiniLM, flat) on the HotpotQA slices, over the pooled 14,835-paragraph corpus.

    .venv/bin/python tests/benchmarks/bench_retrieval_quality.py [--data ../shared/data] [--work_dir DIR]
        --beside nothing

Every question of hotpotqa/rpt_distractor_dev_sample_{train,dev,test} has two gold paragraphs; their
(title, text) equal wiki_paragraphs passages exactly, which gives the gold corpus ids. Recall@k = gold
paragraphs in the top k / 2 (trec_eval convention, `r3forge.metrics.recall_batch`), averaged over questions.
Indexes are built into --work_dir once and reused (encoding the corpus with MiniLM takes minutes on 2 CPU
cores); --rebuild forces a rebuild.

The result file (`--out`, default `tests/benchmarks/results/retrieval_quality.json`) holds the figures, the
tables `recall` and `vs_bm25`, and the provenance (result_file.py); `--beside` says what shared the cores
(recall does not depend on it; the index build and search seconds it also records do).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import datasets
import numpy as np
from render_tables import markdown_table
from result_file import NOT_RECORDED, write_result

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
RESULT = Path(__file__).parent / "results" / "retrieval_quality.json"
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


def measure(args: argparse.Namespace) -> dict:
    """Build or reuse both indexes and evaluate every slice; the figures of the result file."""
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

    retrievers = {}
    for kind, name in (
        ("bm25", "BM25 (bm25s lucene, k1=1.5 b=0.75, english stem)"),
        ("dense", "dense MiniLM-L6 flat IP"),
    ):
        folder, seconds = ensure_index(kind, corpus, work / f"wiki-{kind}", args.rebuild)
        built = f"built in {seconds:.0f}s" if seconds is not None else "reused"
        retriever = load_retriever(folder, backend="numpy")
        start = time.perf_counter()
        recall = {s: evaluate(retriever, questions[s], qrels[s]) for s in questions}
        search_s = time.perf_counter() - start
        print(f"{name}: index {built}; {len(questions['all'])} queries searched in {search_s:.1f}s")
        retrievers[kind] = {"name": name, "index_build_s": seconds, "search_s": search_s,
                            "recall": {s: {f"R@{k}": r[k] for k in KS} for s, r in recall.items()}}  # fmt: skip
    base = retrievers["bm25"]["recall"]["all"]
    for r in retrievers.values():
        r["vs_bm25_all"] = {k: v / base[k] for k, v in r["recall"]["all"].items()}
    return {"corpus_passages": len(corpus), "questions": {s: len(q) for s, q in questions.items()},
            "ks": list(KS), "retrievers": retrievers}  # fmt: skip


def recall_table(figures: dict) -> dict:
    """Recall@k of each retriever on each slice.

    >>> r = {"bm25": {"name": "BM25", "recall": {"all": {"R@2": 0.41234, "R@20": 0.8}}}}
    >>> recall_table({"ks": [2, 20], "retrievers": r})["rows"]
    [['BM25', 'all', '0.412', '0.800']]
    """
    rows = [[r["name"], s, *(f"{recall[f'R@{k}']:.3f}" for k in figures["ks"])]
            for r in figures["retrievers"].values() for s, recall in r["recall"].items()]  # fmt: skip
    columns = ["retriever", "slice", *(f"R@{k}" for k in figures["ks"])]
    return {"columns": columns, "align": "ll" + "r" * len(figures["ks"]), "rows": rows}


def ratio_table(figures: dict) -> dict:
    """Recall@k on all questions as a ratio to BM25's, per retriever.

    >>> r = {"bm25": {"name": "BM25", "vs_bm25_all": {"R@2": 1.0, "R@20": 1.0}},
    ...      "dense": {"name": "dense", "vs_bm25_all": {"R@2": 0.8765, "R@20": 1.1}}}
    >>> ratio_table({"ks": [2, 20], "retrievers": r})["rows"]
    [['BM25', '1.00x', '1.00x'], ['dense', '0.88x', '1.10x']]
    """
    rows = [[r["name"], *(f"{r['vs_bm25_all'][f'R@{k}']:.2f}x" for k in figures["ks"])]
            for r in figures["retrievers"].values()]  # fmt: skip
    columns = ["retriever (all questions)", *(f"R@{k} vs BM25" for k in figures["ks"])]
    return {"columns": columns, "align": "l" + "r" * len(figures["ks"]), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", default=os.environ.get("R3FORGE_SHARED_DATA", str(REPO.parent / "shared" / "data"))
    )
    parser.add_argument("--work_dir", default="/tmp/r3forge-bench-quality")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    parser.add_argument("--out", default=str(RESULT), help="result file")
    args = parser.parse_args()

    figures = measure(args)
    tables = {"recall": recall_table(figures), "vs_bm25": ratio_table(figures)}
    print("\nRecall@k (gold paragraphs in top k / 2), baseline BM25 = 1.00x")
    for table in tables.values():
        print("\n" + "\n".join(markdown_table(table)))
    write_result(Path(args.out), figures, tables, beside=args.beside)
    print(f"result: {args.out}")


if __name__ == "__main__":
    main()
