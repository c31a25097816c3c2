"""`r3forge train-cross-encoder` on 8 HotpotQA questions for a few steps: the saved folder loads as a
`CrossEncoderReranker` and scores finite, right-shaped values; config and data errors name the problem."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from r3forge.cli import main as r3forge_main
from r3forge.config import parse_config
from r3forge.data.loaders import load_qa
from r3forge.errors import ConfigError
from r3forge.rerank import CrossEncoderConfig, CrossEncoderReranker, RetrieverOrder, to_candidates
from r3forge.rerank.train_cross import TrainCrossEncoderConfig, gold_ranking_metrics, main, pair_dataset

TRAIN = "hotpotqa/rpt_distractor_dev_sample_train.jsonl"
DEV = "hotpotqa/rpt_distractor_dev_sample_dev.jsonl"


@pytest.mark.slow
def test_train_load_and_score(shared_data: Path, minilm_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "ce"
    argv = ["--qa_path", str(shared_data / TRAIN), "--output_dir", str(out), "--base_model", str(minilm_path),
            "--max_questions", "8", "--negatives_per_question", "2", "--batch_size", "8", "--max_length", "128",
            "--eval_path", str(shared_data / DEV), "--eval_questions", "2"]  # fmt: skip
    assert r3forge_main(["train-cross-encoder", *argv]) == 0
    info = json.loads((out / "train_info.json").read_text())
    assert (info["questions"], info["pairs"], info["positives"], info["steps"]) == (8, 32, 16, 4)
    assert np.isfinite(info["train_loss"]) and set(info["eval"]) == {"retriever_order", "cross_encoder"}
    assert info["eval"]["cross_encoder"]["questions"] == 2
    reranker = CrossEncoderReranker.from_config(CrossEncoderConfig(model=str(out)))
    records = list(load_qa(shared_data / DEV).select(range(2)))
    outs = reranker.rerank(
        [r["question"] for r in records], [to_candidates(r["passages"])[:3] for r in records]
    )
    assert [len(o.scores) for o in outs] == [3, 3] and np.isfinite([o.scores for o in outs]).all()
    with pytest.raises(ConfigError, match="not empty"):  # the folder holds a run: not overwritten by default
        main(TrainCrossEncoderConfig(qa_path=str(shared_data / TRAIN), output_dir=str(out), max_questions=1))


def test_pairs_metrics_and_config_errors(tmp_path: Path) -> None:
    record = {"question": "Who?", "passages": [
        {"id": "a", "title": "A", "text": "x", "relevance": 0}, {"id": "b", "title": "B", "text": "y", "relevance": 2},
        {"id": "c", "title": "C", "text": "z", "relevance": 0}, {"id": "d", "title": "D", "text": "w", "relevance": 1}]}  # fmt: skip
    data = pair_dataset(
        [record, {"question": "none", "passages": record["passages"][:1]}], negatives=1, seed=3
    )
    assert (
        data["label"].count(1.0) == 2 and len(data) == 3
    )  # both golds + one negative; no-gold record skipped
    metrics = gold_ranking_metrics(RetrieverOrder(), [record], k=2)
    assert metrics["recall@2"] == 0.5 and 0 < metrics["ndcg@2"] < 1 and metrics["questions"] == 1
    with pytest.raises(ConfigError, match="batch_size must be >= 1"):
        TrainCrossEncoderConfig(qa_path="x", output_dir="y", batch_size=0)
    with pytest.raises(ConfigError, match="unknown flag '--epoch'"):
        parse_config((TrainCrossEncoderConfig,), ["--qa_path", "x", "--output_dir", "y", "--epoch", "2"])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("mine")
    empty = tmp_path / "qa.jsonl"
    no_gold = {"id": "q", "question": "Who?", "answer": "A", "supporting_facts": {"title": [], "sent_id": []},
               "context": {"title": ["T"], "sentences": [["Text."]]}}  # fmt: skip
    empty.write_text(json.dumps(no_gold) + "\n")
    with pytest.raises(ConfigError, match="no record has a gold passage"):
        main(TrainCrossEncoderConfig(qa_path=str(empty), output_dir=str(tmp_path / "other"), overwrite=True))
    assert (tmp_path / "other" / "keep.txt").read_text() == "mine"
