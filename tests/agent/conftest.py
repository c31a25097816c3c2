"""A small synthetic world (200 passages, 30 questions) on disk with its real BM25 index."""

from __future__ import annotations

from pathlib import Path

import pytest

from r3forge.data.synth_world import SynthWorldConfig
from r3forge.data.synth_world import main as write_world
from r3forge.retrieval import build_bm25_index


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("agent_world")
    write_world(SynthWorldConfig(seed=0, num_passages=200, num_questions=30, output_dir=str(root / "world")))
    index = build_bm25_index(root / "world" / "corpus.jsonl", root / "bm25", show_progress=False)
    return {"questions": root / "world" / "questions.jsonl", "index": Path(index)}
