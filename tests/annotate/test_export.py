"""SFT export of verbal annotations: dedup, score rebalancing, split by question, chat rows, files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import datasets
import pytest

from r3forge.annotate.export import (
    ExportSFTConfig,
    build_sft,
    dedup,
    export_sft,
    paraphrase_row,
    rebalance,
)
from r3forge.annotate.verbal import load_template, parse_annotation
from r3forge.config import missing_help
from r3forge.data.rows import split_by_question
from r3forge.errors import ConfigError
from r3forge.synth.store import ShardSpec, ShardStore

TEMPLATE, VERSION = load_template()
SCORES = [5] * 4 + [4] * 6 + [3] * 10 + [2] * 12 + [1] * 28  # 60 pairs over 20 questions


def annotation(i: int, score: int) -> dict:
    return {
        "question_id": f"q{i // 3}",
        "question": f"Question number {i // 3}?",
        "doc_id": f"d{i}",
        "doc_title": f"Doc {i}",
        "doc_text": f"Document text {i}.",
        "relevance": 0,
        "comment": f"A comment on document {i}.",
        "score": score,
        "score_logprob": -0.25,
        "score_logprobs": None,
    }


@pytest.fixture()
def records() -> list[dict]:
    return [annotation(i, s) for i, s in enumerate(SCORES)]


def test_config_help() -> None:
    assert missing_help(ExportSFTConfig) == []


def test_dedup_keeps_first(records) -> None:
    dupes = [*records, records[0] | {"comment": "other"}, records[5]]
    out = dedup(dupes)
    assert len(out) == len(records) and out[0]["comment"] == records[0]["comment"]


def test_rebalance_caps(records) -> None:
    counts = Counter(r["score"] for r in rebalance(records, 2.0, None, seed=0))
    assert counts == {5: 4, 4: 6, 3: 8, 2: 8, 1: 8}
    counts = Counter(r["score"] for r in rebalance(records, None, 5, seed=0))
    assert counts == {5: 4, 4: 5, 3: 5, 2: 5, 1: 5}
    assert rebalance(records, None, None, seed=0) == records
    assert rebalance(records, 2.0, None, seed=0) == rebalance(records, 2.0, None, seed=0)  # seeded


def test_split_by_question(records) -> None:
    train, validation = split_by_question(records, 0.25, seed=1)
    train_q, val_q = {r["question_id"] for r in train}, {r["question_id"] for r in validation}
    assert not train_q & val_q and len(val_q) == 5 and len(train) + len(validation) == len(records)
    assert split_by_question(records, 0.25, seed=1) == (train, validation)
    assert split_by_question(records, 0.25, seed=2) != (train, validation)


def test_build_rows(records) -> None:
    config = ExportSFTConfig(
        input_dir="-", output_dir="-", system_prompt="You rerank.", validation_fraction=0.2
    )
    dsd = build_sft(records + records[:3], config, TEMPLATE)
    assert isinstance(dsd, datasets.DatasetDict) and dsd.num_rows == {"train": 48, "validation": 12}
    assert not set(dsd["train"]["question_id"]) & set(dsd["validation"]["question_id"])
    for row in dsd["train"]:
        system, user = row["prompt"]
        (assistant,) = row["completion"]
        assert system == {"role": "system", "content": "You rerank."} and user["role"] == "user"
        assert assistant["role"] == "assistant" and assistant["content"].endswith(f"Score: {row['score']}")
        assert assistant["content"].startswith("Comment: A comment on document")
        assert assistant["content"] not in user["content"] and "A comment on" not in user["content"]
        assert f"Question number {row['question_id'][1:]}?" in user["content"]
    with pytest.raises(ConfigError, match="validation_fraction"):
        build_sft(records, ExportSFTConfig("-", "-", validation_fraction=1.0), TEMPLATE)


def test_score_first_rows_parse_back(records) -> None:
    """The score-first variant: the completion opens with the score, and the parser the reranker and the task
    eval use reads it back with the same score and comment."""
    config = ExportSFTConfig(input_dir="-", output_dir="-", validation_fraction=0.2, score_first=True)
    dsd = build_sft(records, config, TEMPLATE)
    for row in dsd["train"]:
        (assistant,) = row["completion"]
        assert assistant["content"].startswith(f"Score: {row['score']}\nComment: A comment on document")
        parsed = parse_annotation(assistant["content"])
        assert (parsed.score, parsed.comment) == (row["score"], f"A comment on document {row['doc_id'][1:]}.")
    with pytest.raises(ConfigError, match="score_first applies to verbal"):
        build_sft(records, config, TEMPLATE, row=paraphrase_row)


def write_run(root: Path, records: list[dict], version: str) -> None:
    """A store folder as the engine writes it (accepted records with the annotation under `output`)."""
    identity = {"step": "verbal_annotation", "version": version, "model": "m"}
    with ShardStore(root, ShardSpec(), identity) as store:
        store.append([{"key": f"k{i}", **identity, "output": r} for i, r in enumerate(records)], [])


def test_export_writes_files(records, tmp_path: Path) -> None:
    write_run(tmp_path / "run", records, f"{VERSION}+w120-r20-f0.8")
    config = ExportSFTConfig(str(tmp_path / "run"), str(tmp_path / "sft"), balance_ratio=1.0)
    dsd = export_sft(config)
    train = Counter(dsd["train"]["score"])
    assert len(set(train.values())) == 1  # the training split: every class capped at the rarest
    held = set(dsd["validation"]["question_id"])
    assert dsd.num_rows["validation"] == sum(str(r["question_id"]) in held for r in records)  # all pairs kept
    assert datasets.load_from_disk(str(tmp_path / "sft"))["train"]["doc_id"] == dsd["train"]["doc_id"]
    lines = (tmp_path / "sft" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["doc_id"] for line in lines] == dsd["train"]["doc_id"]
    with pytest.raises(ConfigError, match="not empty"):
        export_sft(config)
    write_run(tmp_path / "other", records, "custom-0123456789ab+w120-r20-f0.8")
    with pytest.raises(ConfigError, match="template_path"):
        export_sft(ExportSFTConfig(str(tmp_path / "other"), str(tmp_path / "sft2")))


def test_export_refuses_a_folder_that_is_not_one_run(records, tmp_path: Path) -> None:
    """The sharded teacher run of the paper header writes <run>/s0 .. s3; exporting <run> itself read no
    record and wrote an empty SFT set (exit 0) that `r3forge sft` then failed on."""
    for shard in ("s0", "s1"):
        write_run(tmp_path / "run" / shard, records[:3], f"{VERSION}+w120-r20-f0.8")
    with pytest.raises(
        ConfigError, match=r"holds the shard folders .*r3forge synth merge --inputs .*s0 .*s1"
    ):
        export_sft(ExportSFTConfig(str(tmp_path / "run"), str(tmp_path / "sft")))
    with pytest.raises(ConfigError, match="is not a folder"):
        export_sft(ExportSFTConfig(str(tmp_path / "typo"), str(tmp_path / "sft")))
    assert not (tmp_path / "sft").exists()


def test_export_refuses_a_run_without_accepted_annotations(tmp_path: Path) -> None:
    """A teacher run whose every output was rejected (a small teacher, gpt-oss's reasoning eating max_tokens)
    is an error naming the reject reasons, not an empty dataset."""
    identity = {"step": "verbal_annotation", "version": f"{VERSION}+w120-r20-f0.8", "model": "m"}
    rejected = [{"key": f"k{i}", **identity, "reason": "truncated", "detail": ""} for i in range(3)]
    with ShardStore(tmp_path / "run", ShardSpec(), identity) as store:
        store.append([], rejected)
    with pytest.raises(
        ConfigError, match=r"nothing to export: 0 accepted annotation\(s\), 3 rejected .*truncated"
    ):
        export_sft(ExportSFTConfig(str(tmp_path / "run"), str(tmp_path / "sft")))
    assert not (tmp_path / "sft").exists()
