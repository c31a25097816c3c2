"""`r3forge index build|info|search` (the table: `r3forge.cli`).

r3forge index build --corpus '../shared/data/wiki_paragraphs/*.jsonl' --kind bm25 --output indexes/wiki-bm25
r3forge index build --config configs/retrieval/wiki_minilm_flat.yaml --encoder all-minilm-l6-v2
r3forge index info --index indexes/wiki-bm25
r3forge index search --index indexes/wiki-bm25 --queries "who wrote Hamlet" --k 3
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field

from r3forge.config import parse_config
from r3forge.models import check_models
from r3forge.retrieval import load_retriever
from r3forge.retrieval.base import KINDS, MANIFEST_NAME, read_manifest
from r3forge.retrieval.bm25 import BM25Config, build_bm25_index, token_regex
from r3forge.retrieval.dense import DenseConfig, build_dense_index
from r3forge.runfolder import claim_command, record_owner


@dataclass
class IndexBuildConfig:
    """`r3forge index build`; the BM25Config / DenseConfig fields of the chosen kind apply too."""

    corpus: list[str] = field(metadata={"help": "Corpus file(s), glob(s) or folder(s) of passages."})
    output: str = field(metadata={"help": "Index folder to write (built aside, then renamed into place)."})
    kind: str = field(default="bm25", metadata={"help": "Index kind.", "choices": list(KINDS)})
    corpus_format: str = field(
        default="auto", metadata={"help": "Corpus format: auto, passages or flashrag_corpus."}
    )
    overwrite: bool = field(
        default=False, metadata={"help": "Move an existing output folder aside to <folder>.replaced-<time>."}
    )


@dataclass
class IndexInfoConfig:
    index: str = field(metadata={"help": "Index folder."})


@dataclass
class IndexSearchConfig:
    index: str = field(metadata={"help": "Index folder."})
    queries: list[str] = field(metadata={"help": "One or more queries."})
    k: int = field(default=5, metadata={"help": "Passages per query."})
    backend: str = field(
        default="numpy", metadata={"help": "BM25 backend: numpy (no JIT wait), numba, auto."}
    )


def build(config: IndexBuildConfig, bm25: BM25Config, dense: DenseConfig) -> None:
    corpus = config.corpus[0] if len(config.corpus) == 1 else config.corpus
    configs = [config, bm25 if config.kind == "bm25" else dense]
    wanted = claim_command(
        "index build", config.output, configs, config.overwrite, (MANIFEST_NAME,), write=False
    )
    start = time.perf_counter()
    if config.kind == "bm25":
        build_bm25_index(corpus, config.output, bm25, config.corpus_format, config.overwrite)
    else:
        build_dense_index(corpus, config.output, dense, config.corpus_format, config.overwrite)
    record_owner(config.output, "index build", wanted)
    manifest = read_manifest(config.output)
    print(
        f"{config.kind} index of {manifest.count} passages -> {config.output} ({time.perf_counter() - start:.1f}s)"
    )


def build_main(argv: list[str]) -> int:
    config, bm25, dense = parse_config(
        (IndexBuildConfig, BM25Config, DenseConfig), argv, prog="r3forge index build"
    )
    if config.kind == "dense":
        check_models(dense)
    else:
        token_regex(bm25)
    build(config, bm25, dense)
    return 0


def info(argv: list[str]) -> int:
    (cfg,) = parse_config((IndexInfoConfig,), argv, prog="r3forge index info")
    print(json.dumps(dataclasses.asdict(read_manifest(cfg.index)), indent=2, ensure_ascii=False))
    return 0


def search(argv: list[str]) -> int:
    (cfg,) = parse_config((IndexSearchConfig,), argv, prog="r3forge index search")
    retriever = load_retriever(cfg.index, backend=cfg.backend)
    for query, hits in zip(cfg.queries, retriever.search(cfg.queries, cfg.k), strict=True):
        print(f"# {query}")
        for (pid, score), passage in zip(hits, retriever.get([pid for pid, _ in hits]), strict=True):
            print(f"{score:9.4f}  {pid}  {passage['title']}: {passage['text'][:100]}")
    return 0
