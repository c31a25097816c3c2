"""Dense retrieval throughput with the embedded MiniLM on this machine's CPU cores: indexing passages/s,
query encoding, FAISS flat vs HNSW search, end-to-end `DenseRetriever.search`.

    .venv/bin/python tests/benchmarks/bench_dense.py [--n 2000] [--full_index DIR]

--n passages of the wiki corpus are indexed (encode + FAISS add + save). Search timings use --full_index
when given (e.g. the 14,835-passage flat index that bench_retrieval_quality.py leaves in
/tmp/r3forge-bench-quality/wiki-dense; an HNSW index is built from its saved embeddings), else the --n index.
Ratios are against a named baseline on each line.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

from r3forge.data.loaders import load_corpus, load_qa
from r3forge.retrieval import DenseConfig, DenseRetriever, build_dense_index

REPO = Path(__file__).resolve().parents[2]
WIKI_GLOB = "wiki_paragraphs/hotpot_dev_distractor_paragraphs.part0*.jsonl"
SLICES = [f"hotpotqa/rpt_distractor_dev_sample_{s}.jsonl" for s in ("train", "dev", "test")]
K = 10


def timed(fn, *args) -> tuple[object, float]:
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


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
    args = parser.parse_args()
    data, work = Path(args.data), Path(args.work_dir)
    print(f"torch threads: {torch.get_num_threads()}, CPU cores: {os.cpu_count()}")

    corpus = load_corpus(str(data / WIKI_GLOB)).select(range(args.n))
    questions = [q for s in SLICES for q in load_qa(data / s)["question"]]

    # ---- indexing: encode (batch 64, max 256 tokens) + FAISS add + save
    config = DenseConfig(encoder="all-minilm-l6-v2", device="cpu")
    flat_dir, t_flat = timed(lambda: build_dense_index(corpus, work / "flat", config, overwrite=True))
    print(f"\nindexing {args.n} passages, flat: {t_flat:.1f}s = {args.n / t_flat:.1f} passages/s")
    hnsw_cfg = DenseConfig(encoder="all-minilm-l6-v2", index_type="hnsw", embeddings_from=str(flat_dir))
    _, t_hnsw = timed(
        lambda: build_dense_index(corpus, work / "hnsw", hnsw_cfg, overwrite=True, show_progress=False)
    )
    print(f"HNSW (M=32, efC=200) from the saved embeddings: {t_hnsw:.1f}s, no re-encoding")

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
        print(f"HNSW over --full_index ({len(flat)} vectors) from saved embeddings: {t_full_hnsw:.1f}s")
    else:
        hnsw_path = work / "hnsw"
    hnsw = DenseRetriever.load(hnsw_path, device="cpu")
    print(f"\nsearch timings on {len(flat)} passages, {len(questions)} HotpotQA questions, top-{K}")

    single = questions[:100]
    _, t_one = timed(lambda: [flat.encode_queries([q]) for q in single])
    emb, t_batch = timed(flat.encode_queries, questions)  # (Q, 384)
    base = len(single) / t_one
    print("query encoding (baseline: one query per call = 1.0x)")
    print(f"  one per call     {base:9.1f} q/s   1.0x")
    print(
        f"  batches of {flat.batch_size:<4}  {len(questions) / t_batch:9.1f} q/s   {len(questions) / t_batch / base:.1f}x"
    )

    (_, flat_rows), t_fs = timed(flat.index.search, emb, K)
    (_, hnsw_rows), t_hs = timed(hnsw.index.search, emb, K)
    recall = np.mean([len(set(a) & set(b)) / K for a, b in zip(hnsw_rows, flat_rows, strict=True)])
    base = len(questions) / t_fs
    print("FAISS search of pre-encoded queries (baseline: flat inner product = 1.0x)")
    print(f"  flat IP          {base:9.0f} q/s   1.0x")
    print(
        f"  HNSW efSearch={hnsw.index.hnsw.efSearch:<3} {len(questions) / t_hs:9.0f} q/s   {len(questions) / t_hs / base:.1f}x"
        f"   (top-{K} overlap with flat {recall:.1%})"
    )

    _, t_e2e = timed(flat.search, questions, K)
    print(f"end to end DenseRetriever.search (encode + flat search + ids): {len(questions) / t_e2e:.1f} q/s")


if __name__ == "__main__":
    main()
