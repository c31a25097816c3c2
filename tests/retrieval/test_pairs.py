"""(question, document) pairs: own passages, a real BM25 index's top-n with gold labels, and the job's
pairing config (dry run through the CLI: no teacher is called)."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from r3forge.cli import run_command
from r3forge.data.loaders import load_qa
from r3forge.retrieval import build_bm25_index, load_retriever
from r3forge.retrieval.pairs import qa_items, retrieved_items


@pytest.fixture(scope="module")
def qa(shared_data: Path) -> list[dict]:
    return list(load_qa(shared_data / "hotpotqa" / "rpt_distractor_dev_sample_dev.jsonl"))[:40]


@pytest.fixture(scope="module")
def index(qa, tmp_path_factory) -> Path:
    """BM25 over the 400 paragraphs of 40 HotpotQA questions, with corpus ids unlike the QA records' ids."""
    rows = {p["title"]: p for r in qa for p in r["passages"]}
    corpus = datasets.Dataset.from_list(
        [{"id": f"wiki-{i}", "title": t, "text": p["text"]} for i, (t, p) in enumerate(sorted(rows.items()))]
    )
    out = tmp_path_factory.mktemp("idx") / "bm25"
    return build_bm25_index(corpus, out, show_progress=False)


def test_own_passages(qa) -> None:
    items = list(qa_items(qa, max_questions=2, max_docs=10))
    assert len(items) == 20 and [i["rank"] for i in items[:10]] == list(range(10))
    assert sum(i["relevance"] > 0 for i in items[:10]) == 2  # HotpotQA distractor: 2 gold paragraphs of 10
    assert all(i["retrieval_score"] is None and isinstance(i["answer_in_doc"], bool) for i in items)


def test_retrieved_pairs_carry_gold_labels_by_title(qa, index) -> None:
    retriever = load_retriever(index)
    items = list(retrieved_items(qa, retriever, top_n=5, max_questions=30, batch_size=7))
    assert len(items) == 150
    by_q: dict[str, list[dict]] = {}
    for item in items:
        by_q.setdefault(item["question_id"], []).append(item)
    assert len(by_q) == 30
    for record in qa[:30]:
        rows = by_q[record["id"]]
        assert [r["rank"] for r in rows] == list(range(5))
        scores = [r["retrieval_score"] for r in rows]
        assert scores == sorted(scores, reverse=True)
        gold_titles = {p["title"] for p in record["passages"] if p["relevance"] > 0}
        assert all(r["relevance"] == int(r["doc_title"] in gold_titles) for r in rows)
        assert all(r["doc_id"].startswith("wiki-") for r in rows)
    hit = sum(any(r["relevance"] for r in rows) for rows in by_q.values())
    assert hit >= 25, f"BM25 top-5 found a gold paragraph for only {hit}/30 questions"


def test_cli_dry_run_with_retrieval_pairing(shared_data, index, smollm2_path, tmp_path, capsys) -> None:
    qa_path = shared_data / "hotpotqa" / "rpt_distractor_dev_sample_dev.jsonl"
    argv = ["verbal", "--qa_path", str(qa_path), "--pairing", "retrieval", "--index", str(index)]
    argv += ["--top_n", "4", "--max_questions", "5", "--output_dir", str(tmp_path / "out"), "--dry_run"]
    argv += ["--max_tokens", "50", "--few_shot"]
    assert run_command("annotate", argv) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "20 items" in line and "20 requests" in line and "<= 1000 completion tokens" in line
    assert not (tmp_path / "out").exists()  # a dry run writes nothing
