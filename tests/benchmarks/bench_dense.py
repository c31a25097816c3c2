"""Dense retrieval throughput with the embedded MiniLM on this machine's CPU cores: indexing passages/s,
query encoding, FAISS flat vs HNSW search, end-to-end `DenseRetriever.search`.

    .venv/bin/python tests/benchmarks/bench_dense.py [--n 2000] [--full_index DIR] --beside nothing

--n passages of the wiki corpus are indexed (encode + FAISS add + save). Search timings use --full_index
when given (e.g. the 14,835-passage flat index that bench_retrieval_quality.py leaves in
/tmp/r3forge-bench-quality/wiki-dense; an HNSW index is built from its saved embeddings), else the --n index.
Ratios are against a named baseline in each table.

Run it alone: it times. The result file (`--out`, default `tests/benchmarks/results/dense/<cpu kind>.json`, one
per CPU kind, result_file.cpu_kind) holds the figures, the tables `indexing`, `query_encoding`,
`faiss_search` and `end_to_end`, and the provenance (result_file.py); `--beside` says what shared the cores.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch
from render_tables import markdown_table
from result_file import NOT_RECORDED, cpu_kind, write_result

from r3forge.data.loaders import load_corpus, load_qa
from r3forge.retrieval import DenseConfig, DenseRetriever, build_dense_index

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).parent / "results" / "dense"
WIKI_GLOB = "wiki_paragraphs/hotpot_dev_distractor_paragraphs.part0*.jsonl"
SLICES = [f"hotpotqa/rpt_distractor_dev_sample_{s}.jsonl" for s in ("train", "dev", "test")]
K = 10


def timed(fn, *args) -> tuple[object, float]:
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def measure(args: argparse.Namespace) -> dict:
    """Index --n passages, then time query encoding and search; the figures of the result file."""
    data, work = Path(args.data), Path(args.work_dir)
    print(f"torch threads: {torch.get_num_threads()}, CPU cores: {os.cpu_count()}")

    corpus = load_corpus(str(data / WIKI_GLOB)).select(range(args.n))
    questions = [q for s in SLICES for q in load_qa(data / s)["question"]]

    # ---- indexing: encode (batch 64, max 256 tokens) + FAISS add + save
    config = DenseConfig(encoder="all-minilm-l6-v2", device="cpu")
    flat_dir, t_flat = timed(lambda: build_dense_index(corpus, work / "flat", config, overwrite=True))
    hnsw_cfg = DenseConfig(encoder="all-minilm-l6-v2", index_type="hnsw", embeddings_from=str(flat_dir))
    _, t_hnsw = timed(
        lambda: build_dense_index(corpus, work / "hnsw", hnsw_cfg, overwrite=True, show_progress=False)
    )
    indexing = {"passages": args.n, "flat_s": t_flat, "passages_per_s": args.n / t_flat, "hnsw_s": t_hnsw}

    # ---- queries
    flat_path = Path(args.full_index) if args.full_index else flat_dir
    flat = DenseRetriever.load(flat_path, device="cpu")
    if args.full_index:
        hnsw_cfg = DenseConfig(
            encoder=flat.manifest.encoder or "", index_type="hnsw", embeddings_from=str(flat_path)
        )
        full = flat.passages.dataset
        hnsw_path, t_full_hnsw = timed(
            lambda: build_dense_index(full, work / "full-hnsw", hnsw_cfg, overwrite=True, show_progress=False)
        )
        indexing["full_index"] = {"path": str(flat_path), "vectors": len(flat), "hnsw_s": t_full_hnsw}
    else:
        hnsw_path = work / "hnsw"
    hnsw = DenseRetriever.load(hnsw_path, device="cpu")
    print(f"search timings on {len(flat)} passages, {len(questions)} HotpotQA questions, top-{K}")

    single = questions[:100]
    _, t_one = timed(lambda: [flat.encode_queries([q]) for q in single])
    emb, t_batch = timed(flat.encode_queries, questions)  # (Q, 384)
    base = len(single) / t_one
    encoding = {"one_per_call_qps": base, "one_per_call_queries": len(single), "batch_size": flat.batch_size,
                "batched_qps": len(questions) / t_batch, "vs_one_per_call": len(questions) / t_batch / base}  # fmt: skip

    (_, flat_rows), t_fs = timed(flat.index.search, emb, K)
    (_, hnsw_rows), t_hs = timed(hnsw.index.search, emb, K)
    recall = np.mean([len(set(a) & set(b)) / K for a, b in zip(hnsw_rows, flat_rows, strict=True)])
    base = len(questions) / t_fs
    search = {"flat_qps": base, "hnsw_qps": len(questions) / t_hs, "hnsw_ef_search": hnsw.index.hnsw.efSearch,
              "vs_flat": len(questions) / t_hs / base, "hnsw_overlap_with_flat": float(recall)}  # fmt: skip

    _, t_e2e = timed(flat.search, questions, K)
    return {"torch_threads": torch.get_num_threads(), "cpu_cores": os.cpu_count(), "k": K,
            "questions": len(questions), "search_passages": len(flat), "indexing": indexing,
            "query_encoding": encoding, "faiss_search": search, "end_to_end_qps": len(questions) / t_e2e}  # fmt: skip


def indexing_table(figures: dict) -> dict:
    """Indexing seconds and rate (no baseline: absolute figures).

    >>> indexing_table({"indexing": {"passages": 2000, "flat_s": 61.04, "passages_per_s": 32.77,
    ...                              "hnsw_s": 0.43}})["rows"]  # doctest: +NORMALIZE_WHITESPACE
    [['encode (batch 64, max 256 tokens) + flat index + save', '2000', '61.0', '32.8'],
     ['HNSW (M=32, efC=200) from the saved embeddings, no re-encoding', '2000', '0.4', '']]
    """
    x = figures["indexing"]
    rows = [
        ["encode (batch 64, max 256 tokens) + flat index + save", str(x["passages"]), f"{x['flat_s']:.1f}",
         f"{x['passages_per_s']:.1f}"],
        ["HNSW (M=32, efC=200) from the saved embeddings, no re-encoding", str(x["passages"]),
         f"{x['hnsw_s']:.1f}", ""],
    ]  # fmt: skip
    if "full_index" in x:
        full = x["full_index"]
        rows.append(["HNSW over --full_index from its saved embeddings", str(full["vectors"]),
                     f"{full['hnsw_s']:.1f}", ""])  # fmt: skip
    return {"columns": ["indexing", "passages", "seconds", "passages/s"], "align": "lrrr", "rows": rows}


def encoding_table(figures: dict) -> dict:
    """Query encoding rates, as ratios to one query per call.

    >>> e = {"one_per_call_qps": 95.12, "one_per_call_queries": 100, "batch_size": 64, "batched_qps": 410.6,
    ...      "vs_one_per_call": 4.3167}
    >>> encoding_table({"questions": 1100, "query_encoding": e})["rows"]
    [['one per call (first 100 questions)', '95.1', '1.0x'], ['batches of 64', '410.6', '4.3x']]
    """
    e = figures["query_encoding"]
    rows = [
        [
            f"one per call (first {e['one_per_call_queries']} questions)",
            f"{e['one_per_call_qps']:.1f}",
            "1.0x",
        ],
        [f"batches of {e['batch_size']}", f"{e['batched_qps']:.1f}", f"{e['vs_one_per_call']:.1f}x"],
    ]
    columns = [f"query encoding, {figures['questions']} questions", "q/s", "vs one per call"]
    return {"columns": columns, "align": "lrr", "rows": rows}


def search_table(figures: dict) -> dict:
    """FAISS search of the pre-encoded queries, HNSW as a ratio to the flat index, with its top-k overlap.

    >>> s = {"flat_qps": 5210.4, "hnsw_qps": 30123.9, "hnsw_ef_search": 64, "vs_flat": 5.78,
    ...      "hnsw_overlap_with_flat": 0.9936}
    >>> search_table({"k": 10, "search_passages": 14835, "faiss_search": s})["rows"]
    [['flat IP', '5210', '1.0x', ''], ['HNSW efSearch=64', '30124', '5.8x', '99.4%']]
    """
    s, k = figures["faiss_search"], figures["k"]
    rows = [
        ["flat IP", f"{s['flat_qps']:.0f}", "1.0x", ""],
        [f"HNSW efSearch={s['hnsw_ef_search']}", f"{s['hnsw_qps']:.0f}", f"{s['vs_flat']:.1f}x",
         f"{s['hnsw_overlap_with_flat']:.1%}"],
    ]  # fmt: skip
    columns = [f"FAISS search, {figures['search_passages']} passages, top-{k}", "q/s", "vs flat IP",
               f"top-{k} overlap with flat"]  # fmt: skip
    return {"columns": columns, "align": "lrrr", "rows": rows}


def end_to_end_table(figures: dict) -> dict:
    """`DenseRetriever.search` end to end (no baseline: an absolute rate).

    >>> end_to_end_table({"questions": 1100, "end_to_end_qps": 402.26})["rows"]
    [['DenseRetriever.search (encode + flat search + ids)', '402.3']]
    """
    row = ["DenseRetriever.search (encode + flat search + ids)", f"{figures['end_to_end_qps']:.1f}"]
    return {"columns": [f"end to end, {figures['questions']} questions", "q/s"], "align": "lr", "rows": [row]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", default=os.environ.get("R3FORGE_SHARED_DATA", str(REPO.parent / "shared" / "data"))
    )
    parser.add_argument("--n", type=int, default=2000, help="passages to index for the indexing throughput")
    parser.add_argument("--full_index", default=None, help="an existing flat dense index for search timings")
    parser.add_argument("--work_dir", default="/tmp/r3forge-bench-dense")
    parser.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    parser.add_argument("--out", default=None, help="result file (default: results/dense/<cpu kind>.json)")
    args = parser.parse_args()

    figures = measure(args)
    tables = {
        "indexing": indexing_table(figures),
        "query_encoding": encoding_table(figures),
        "faiss_search": search_table(figures),
        "end_to_end": end_to_end_table(figures),
    }
    for table in tables.values():
        print("\n" + "\n".join(markdown_table(table)))
    out = Path(args.out) if args.out else RESULTS / f"{cpu_kind()}.json"
    write_result(out, figures, tables, beside=args.beside)
    print(f"result: {out}")


if __name__ == "__main__":
    main()
