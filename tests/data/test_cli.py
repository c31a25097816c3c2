"""`r3forge data pool`: QA records' passages -> one de-duplicated corpus that indexes and maps back to gold."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from r3forge.cli import run_command
from r3forge.data.cli import PoolConfig, pool
from r3forge.data.loaders import load_corpus, load_qa
from r3forge.errors import ConfigError
from r3forge.retrieval.pairs import gold_relevance

SHARED_DATA = Path(
    os.environ.get("R3FORGE_SHARED_DATA") or Path(__file__).resolve().parents[2].parent / "shared" / "data"
)


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_pool_dedupes_by_title_and_text_and_maps_back_to_gold(tmp_path: Path):
    shared = {
        "title": "Politician",
        "text": "A politician takes part in policy-making.",
        "is_supporting": True,
    }
    qa = _write(tmp_path / "popqa.jsonl", [
        {"id": 1, "question": "What is A's occupation?", "possible_answers": '["politician"]',
         "paragraphs": [{"title": "A", "text": "A was a politician.", "is_supporting": True}, shared]},
        {"id": 2, "question": "What is B's occupation?", "possible_answers": '["politician"]',
         "paragraphs": [{"title": "B", "text": "B was a politician.", "is_supporting": True}, shared]},
    ])  # fmt: skip
    out = tmp_path / "corpus" / "pooled.jsonl"
    stats = pool(PoolConfig(qa_path=str(qa), output=str(out)))
    assert (stats["passages"], stats["distinct"]) == (4, 3)
    corpus = load_corpus(str(out))
    assert sorted(corpus["title"]) == ["A", "B", "Politician"]
    # record 2's copy of the shared paragraph now has record 1's id: still gold for record 2, by title
    record2 = load_qa(str(qa))[1]
    (shared_doc,) = [d for d in corpus if d["title"] == "Politician"]
    (other,) = [d for d in corpus if d["title"] == "A"]
    assert shared_doc["id"] not in record2["gold_passage_ids"]
    assert gold_relevance(record2, shared_doc) == 1 and gold_relevance(record2, other) == 0


def test_pool_errors(tmp_path: Path):
    qa = _write(tmp_path / "nq.jsonl", [{"question": "Who?", "answer": ["x"]}])
    with pytest.raises(ConfigError, match="no record carries passages"):
        pool(PoolConfig(qa_path=str(qa), output=str(tmp_path / "c.jsonl")))
    with pytest.raises(ConfigError, match="required: --output"):  # argparse's message, one line
        run_command("data", ["pool", "--qa_path", str(qa)])


@pytest.mark.skipif(not (SHARED_DATA / "hipporag/popqa.json").is_file(), reason="needs ../shared/data")
def test_pool_popqa(tmp_path: Path):
    stats = pool(
        PoolConfig(qa_path=str(SHARED_DATA / "hipporag/popqa.json"), output=str(tmp_path / "p.jsonl"))
    )
    assert stats["records"] == 1000 and stats["passages"] == 2000
    assert 1000 < stats["distinct"] < 2000  # object pages ("Politician", ...) repeat across questions
