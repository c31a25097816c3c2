"""Retrieval configs: help on every field; the shipped configs/retrieval/*.yaml parse."""

from __future__ import annotations

from pathlib import Path

import pytest

from r3forge.config import missing_help, parse_config
from r3forge.retrieval import BM25Config, DenseConfig
from r3forge.retrieval.cli import IndexBuildConfig, IndexInfoConfig, IndexSearchConfig
from r3forge.retrieval.server import ServeConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "retrieval"


@pytest.mark.parametrize(
    "config", [BM25Config, DenseConfig, IndexBuildConfig, IndexInfoConfig, IndexSearchConfig, ServeConfig]
)
def test_every_field_has_help(config: type):
    assert missing_help(config) == []


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_parse(path: Path):
    if path.name.startswith("serve"):
        (serve,) = parse_config((ServeConfig,), ["--config", str(path)])
        assert serve.index and serve.host == "127.0.0.1"
        return
    build, bm25, dense = parse_config((IndexBuildConfig, BM25Config, DenseConfig), ["--config", str(path)])
    assert build.kind in ("bm25", "dense") and build.corpus and build.output
    if build.kind == "bm25":
        assert (bm25.method, bm25.stemmer, bm25.stopwords) == ("lucene", "english", "en")
    if path.name.startswith("e5"):
        assert (dense.query_prefix, dense.passage_prefix) == ("query: ", "passage: ")
