"""bm25s vs rank-bm25 (BM25Okapi) on the 14,835-paragraph wiki corpus: same tokens, same scores, speed.

    .venv/bin/python tests/benchmarks/bench_bm25.py [--data ../shared/data] [--okapi_queries 200]

Both libraries get the very same token lists (`BM25Tokenizer`: lowercase, 2+ char words, English stopwords,
Snowball stemming). bm25s is configured as BM25Okapi: the (k1 + 1) tf component (`method="atire"`) with
Robertson's idf (`idf_method="robertson"`), k1 = 1.5, b = 0.75. The two differ only for terms in more than
half of the passages (rank-bm25 floors their negative idf at 0.25 x mean idf, bm25s at 0); the script
counts such terms. It checks identical top-10 on the sample, then reports queries/s as ratios vs rank-bm25.
Queries: the 1,100 HotpotQA questions of the three rpt_distractor_dev_sample slices.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import bm25s
import numpy as np
from rank_bm25 import BM25Okapi

from r3forge.data.loaders import load_corpus, load_qa
from r3forge.retrieval import BM25Config, BM25Retriever, BM25Tokenizer, build_bm25_index
from r3forge.retrieval.base import passage_text

REPO = Path(__file__).resolve().parents[2]
WIKI_GLOB = "wiki_paragraphs/hotpot_dev_distractor_paragraphs.part0*.jsonl"
SLICES = [f"hotpotqa/rpt_distractor_dev_sample_{s}.jsonl" for s in ("train", "dev", "test")]
K = 10


def okapi_topk(okapi: BM25Okapi, tokens: list[list[str]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """rank-bm25 has no top-k: score every passage, then argpartition. (Q, k) rows and scores."""
    rows, scores = [], []
    for query in tokens:
        s = okapi.get_scores(query)  # (N,)
        top = np.argpartition(-s, k)[:k]
        top = top[np.lexsort((top, -s[top]))]  # best first, ties by row like bm25s
        rows.append(top)
        scores.append(s[top])
    return np.array(rows), np.array(scores)


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", default=os.environ.get("R3FORGE_SHARED_DATA", str(REPO.parent / "shared" / "data"))
    )
    parser.add_argument(
        "--okapi_queries", type=int, default=200, help="rank-bm25 is slow: time it on this many"
    )
    parser.add_argument("--work_dir", default="/tmp/r3forge-bench-bm25")
    args = parser.parse_args()
    data = Path(args.data)

    corpus = load_corpus(str(data / WIKI_GLOB))
    questions = [q for s in SLICES for q in load_qa(data / s)["question"]]
    tokenize = BM25Tokenizer(BM25Config())
    start = time.perf_counter()
    doc_tokens = tokenize([passage_text(t, x) for t, x in zip(corpus["title"], corpus["text"], strict=True)])
    t_tok = time.perf_counter() - start
    query_tokens = tokenize(questions)
    print(f"corpus: {len(corpus)} passages ({t_tok:.2f}s to tokenize), {len(questions)} queries, top-{K}")

    start = time.perf_counter()
    okapi = BM25Okapi(doc_tokens, k1=1.5, b=0.75)
    t_okapi_index = time.perf_counter() - start
    start = time.perf_counter()
    ours = bm25s.BM25(method="atire", idf_method="robertson", k1=1.5, b=0.75, backend="numpy")
    ours.index(doc_tokens, show_progress=False)
    t_bm25s_index = time.perf_counter() - start
    n_docs = len(doc_tokens)
    common = sum(1 for n in _document_frequencies(doc_tokens).values() if n > n_docs / 2)
    print(
        f"index build: rank-bm25 {t_okapi_index:.2f}s, bm25s {t_bm25s_index:.2f}s "
        f"({t_okapi_index / t_bm25s_index:.1f}x); terms in > half the passages: {common}"
    )

    # ---- agreement on the sample
    sample = query_tokens[: args.okapi_queries]
    start = time.perf_counter()
    okapi_rows, okapi_scores = okapi_topk(okapi, sample, K)
    t_okapi = time.perf_counter() - start
    numpy_rows, numpy_scores = ours.retrieve(sample, k=K, show_progress=False)
    pairs = list(zip(okapi_rows, okapi_scores, numpy_rows, numpy_scores, strict=True))
    same_list = np.mean([list(a) == list(b) for a, _, b, _ in pairs])
    same_mod_ties = np.mean([_tie_groups(a, sa) == _tie_groups(b, sb) for a, sa, b, sb in pairs])
    overlap = np.mean([len(set(a) & set(b)) / K for a, _, b, _ in pairs])
    max_diff = float(np.max(np.abs(okapi_scores - numpy_scores) / np.maximum(np.abs(okapi_scores), 1e-9)))
    print(
        f"top-{K} agreement on {len(sample)} queries: identical ranked lists {same_list:.1%}, identical up to "
        f"the order of tied scores {same_mod_ties:.1%}, mean overlap {overlap:.1%}; max relative difference "
        f"of the scores at each rank {max_diff:.1e} (float32 vs float64)"
    )

    # ---- speed (pre-tokenized queries: scoring + top-k only)
    start = time.perf_counter()
    ours.retrieve(query_tokens, k=K, show_progress=False)
    t_numpy = time.perf_counter() - start
    numba = bm25s.BM25(method="atire", idf_method="robertson", k1=1.5, b=0.75, backend="numba")
    numba.index(doc_tokens, show_progress=False)
    start = time.perf_counter()
    numba.retrieve(query_tokens[:2], k=K, show_progress=False)  # JIT compile
    t_jit = time.perf_counter() - start
    start = time.perf_counter()
    numba.retrieve(query_tokens, k=K, show_progress=False)
    t_numba = time.perf_counter() - start
    base = rate(len(sample), t_okapi)
    print(f"\nqueries/s, scoring + top-{K} (baseline: rank-bm25 BM25Okapi = 1.0x)")
    print(f"  rank-bm25 BM25Okapi      {base:10.1f} q/s   1.0x   ({len(sample)} queries)")
    for name, seconds in (("bm25s numpy", t_numpy), ("bm25s numba", t_numba)):
        q = rate(len(query_tokens), seconds)
        print(f"  {name:<24} {q:10.1f} q/s   {q / base:.1f}x   ({len(query_tokens)} queries)")
    print(f"  (numba JIT compile on first call: {t_jit:.1f}s, once per process)")

    # ---- end to end through r3forge (tokenize + search + ids), from a saved index
    index = build_bm25_index(corpus, Path(args.work_dir) / "wiki-bm25", overwrite=True, show_progress=False)
    for backend in ("numpy", "numba"):
        retriever = BM25Retriever.load(index, backend=backend)
        retriever.search(questions[:2], K)
        start = time.perf_counter()
        retriever.search(questions, K)
        q = rate(len(questions), time.perf_counter() - start)
        print(f"  BM25Retriever.search ({backend}, incl. tokenization) {q:10.1f} q/s   {q / base:.1f}x")


def _tie_groups(rows: np.ndarray, scores: np.ndarray) -> list[frozenset[int]]:
    """A ranked list as its groups of equal score (to 5 significant digits), best first; the last group,
    cut by k, is left out since which of its tied members made the top-k is arbitrary."""
    groups: dict[float, set[int]] = {}
    for row, score in zip(rows.tolist(), scores.tolist(), strict=True):
        groups.setdefault(float(f"{score:.5g}"), set()).add(row)
    return [frozenset(g) for _, g in sorted(groups.items(), reverse=True)][:-1]


def _document_frequencies(doc_tokens: list[list[str]]) -> dict[str, int]:
    df: dict[str, int] = {}
    for tokens in doc_tokens:
        for t in set(tokens):
            df[t] = df.get(t, 0) + 1
    return df


if __name__ == "__main__":
    main()
