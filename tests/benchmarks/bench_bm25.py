"""bm25s vs rank-bm25 (BM25Okapi) on the 14,835-paragraph wiki corpus: same tokens, same scores, speed.

    .venv/bin/python tests/benchmarks/bench_bm25.py [--data ../shared/data] [--okapi_queries 200] --beside nothing

Both libraries get the very same token lists (`BM25Tokenizer`: lowercase, 2+ char words, English stopwords,
Snowball stemming). bm25s is configured as BM25Okapi: the (k1 + 1) tf component (`method="atire"`) with
Robertson's idf (`idf_method="robertson"`), k1 = 1.5, b = 0.75. The two differ only for terms in more than
half of the passages (rank-bm25 floors their negative idf at 0.25 x mean idf, bm25s at 0); the script
counts such terms. It checks identical top-10 on the sample, then reports queries/s as ratios vs rank-bm25.
Queries: the 1,100 HotpotQA questions of the three rpt_distractor_dev_sample slices.

Run it alone: it times. The result file (`--out`, default `tests/benchmarks/results/bm25/<cpu kind>.json`, one
per CPU kind, result_file.cpu_kind) holds the figures, the tables `setup`, `agreement` and
`queries_per_second`, and the provenance (result_file.py); `--beside` says what shared the cores.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import bm25s
import numpy as np
from rank_bm25 import BM25Okapi
from render_tables import markdown_table
from result_file import NOT_RECORDED, cpu_kind, write_result

from r3forge.data.loaders import load_corpus, load_qa
from r3forge.retrieval import BM25Config, BM25Retriever, BM25Tokenizer, build_bm25_index
from r3forge.retrieval.base import passage_text

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).parent / "results" / "bm25"
WIKI_GLOB = "wiki_paragraphs/hotpot_dev_distractor_paragraphs.part0*.jsonl"
SLICES = [f"hotpotqa/rpt_distractor_dev_sample_{s}.jsonl" for s in ("train", "dev", "test")]
K = 10
# the rows of the queries/s table, baseline first
LABELS = {
    "rank_bm25": "rank-bm25 BM25Okapi",
    "bm25s_numpy": "bm25s numpy",
    "bm25s_numba": "bm25s numba",
    "retriever_numpy": "BM25Retriever.search (numpy, incl. tokenization)",
    "retriever_numba": "BM25Retriever.search (numba, incl. tokenization)",
}


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


def measure(args: argparse.Namespace) -> dict:
    """Index, compare and time both libraries; the figures of the result file."""
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
    speed = {"rank_bm25": {"qps": base, "queries": len(sample)}}
    for name, seconds in (("bm25s_numpy", t_numpy), ("bm25s_numba", t_numba)):
        speed[name] = {"qps": rate(len(query_tokens), seconds), "queries": len(query_tokens)}

    # ---- end to end through r3forge (tokenize + search + ids), from a saved index
    index = build_bm25_index(corpus, Path(args.work_dir) / "wiki-bm25", overwrite=True, show_progress=False)
    for backend in ("numpy", "numba"):
        retriever = BM25Retriever.load(index, backend=backend)
        retriever.search(questions[:2], K)
        start = time.perf_counter()
        retriever.search(questions, K)
        q = rate(len(questions), time.perf_counter() - start)
        speed[f"retriever_{backend}"] = {"qps": q, "queries": len(questions)}
    for row in speed.values():
        row["vs_rank_bm25"] = row["qps"] / base
    return {
        "passages": n_docs, "queries": len(questions), "k": K, "tokenize_s": t_tok,
        "index_build_s": {"rank_bm25": t_okapi_index, "bm25s": t_bm25s_index}, "terms_over_half": common,
        "agreement": {"queries": len(sample), "identical_lists": float(same_list),
                      "identical_up_to_ties": float(same_mod_ties), "mean_overlap": float(overlap),
                      "max_relative_score_diff": max_diff},
        "numba_jit_s": t_jit, "queries_per_second": speed,
    }  # fmt: skip


def setup_table(figures: dict) -> dict:
    """Tokenizing, both index builds (bm25s as a speed ratio to rank-bm25) and numba's JIT compile.

    >>> setup_table({"passages": 14835, "tokenize_s": 3.14159, "numba_jit_s": 2.5,
    ...              "index_build_s": {"rank_bm25": 1.5, "bm25s": 0.5}})["rows"]  # doctest: +NORMALIZE_WHITESPACE
    [['tokenize 14,835 passages', '3.14', ''], ['index build, rank-bm25 BM25Okapi', '1.50', '1.0x'],
     ['index build, bm25s', '0.50', '3.0x'], ['numba JIT compile on first call (once per process)', '2.50', '']]
    """
    build = figures["index_build_s"]
    rows = [
        [f"tokenize {figures['passages']:,} passages", f"{figures['tokenize_s']:.2f}", ""],
        ["index build, rank-bm25 BM25Okapi", f"{build['rank_bm25']:.2f}", "1.0x"],
        ["index build, bm25s", f"{build['bm25s']:.2f}", f"{build['rank_bm25'] / build['bm25s']:.1f}x"],
        ["numba JIT compile on first call (once per process)", f"{figures['numba_jit_s']:.2f}", ""],
    ]
    return {"columns": ["step", "seconds", "speed vs rank-bm25"], "align": "lrr", "rows": rows}


def agreement_table(figures: dict) -> dict:
    """bm25s against rank-bm25 on the sample's top-k, and the terms where their idf floors differ.

    >>> a = {"queries": 200, "identical_lists": 0.985, "identical_up_to_ties": 1.0, "mean_overlap": 0.9995,
    ...      "max_relative_score_diff": 1.234e-7}
    >>> agreement_table({"k": 10, "agreement": a, "terms_over_half": 0})["rows"]
    [['200', '98.5%', '100.0%', '100.0%', '1.2e-07', '0']]
    """
    a = figures["agreement"]
    columns = [f"top-{figures['k']} compared (queries)", "identical ranked lists",
               "identical up to the order of tied scores", "mean overlap",
               "max relative score difference (float32 vs float64)", "terms in > half the passages"]  # fmt: skip
    row = [str(a["queries"]), f"{a['identical_lists']:.1%}", f"{a['identical_up_to_ties']:.1%}",
           f"{a['mean_overlap']:.1%}", f"{a['max_relative_score_diff']:.1e}", str(figures["terms_over_half"])]  # fmt: skip
    return {"columns": columns, "align": "rrrrrr", "rows": [row]}


def speed_table(figures: dict) -> dict:
    """Queries per second of each library and of `BM25Retriever.search`, as ratios to rank-bm25.

    >>> qps = {"rank_bm25": {"qps": 20.04, "queries": 200}, "bm25s_numpy": {"qps": 2000.0, "queries": 1100}}
    >>> speed_table({"k": 10, "queries_per_second": qps})["rows"]
    [['rank-bm25 BM25Okapi', '20.0', '1.0x', '200'], ['bm25s numpy', '2000.0', '99.8x', '1100']]
    """
    qps = figures["queries_per_second"]
    base = qps["rank_bm25"]["qps"]
    rows = [
        [LABELS[n], f"{r['qps']:.1f}", f"{r['qps'] / base:.1f}x", str(r["queries"])] for n, r in qps.items()
    ]
    columns = [f"scoring + top-{figures['k']}", "q/s", "vs rank-bm25 BM25Okapi", "queries"]
    return {"columns": columns, "align": "lrrr", "rows": rows}


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
    parser.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    parser.add_argument("--out", default=None, help="result file (default: results/bm25/<cpu kind>.json)")
    args = parser.parse_args()

    figures = measure(args)
    tables = {
        "setup": setup_table(figures),
        "agreement": agreement_table(figures),
        "queries_per_second": speed_table(figures),
    }
    for table in tables.values():
        print("\n" + "\n".join(markdown_table(table)))
    out = Path(args.out) if args.out else RESULTS / f"{cpu_kind()}.json"
    write_result(out, figures, tables, beside=args.beside)
    print(f"result: {out}")


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
