"""Judge pass: verdict parsing, P(yes), a real judge run of the embedded model over annotation records
(through the CLI), and export-sft keeping only the approved annotations."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from r3forge.annotate.jobs import JUDGE_CONFIGS
from r3forge.annotate.judge import REASONS, AnnotationJudgeStep, approvals, parse_verdict
from r3forge.annotate.verbal import load_template
from r3forge.backends.base import p_yes
from r3forge.cli import run_command
from r3forge.config import missing_help
from r3forge.synth import Rejected, load_accepted, load_rejected
from r3forge.synth.store import ShardSpec, ShardStore

_, VERSION = load_template()
PAIRS = [
    ("Who wrote Hamlet?", "Hamlet", "Hamlet is a tragedy written by William Shakespeare.",
     "It states that Shakespeare wrote Hamlet, which answers the question.", 5),
    ("Who wrote Hamlet?", "Tulip", "The tulip is a flowering plant of the lily family.",
     "It is about a plant and says nothing about Hamlet.", 1),
    ("What is the capital of Peru?", "Lima", "Lima is the capital and largest city of Peru.",
     "It is about cooking and does not mention any city.", 5),
    ("When did Apollo 11 land?", "Apollo 11", "Apollo 11 landed on the Moon on 20 July 1969.",
     "It gives the landing date, 20 July 1969.", 5),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Verdict: yes\nReason: fits.", (True, "fits.")),
        ("verdict - NO\nreason: the score is too high", (False, "the score is too high")),
        ("**Verdict:** Yes", (True, "")),
        ("Verdict: maybe", Rejected("invalid_verdict", "verdict 'maybe' is not yes/no")),
        ("Sure, looks fine.", Rejected("missing_verdict", "no Verdict: line")),
    ],
)
def test_parse_verdict(text, expected) -> None:
    out = parse_verdict(text)
    assert (out if isinstance(out, Rejected) else out[:2]) == expected


def test_p_yes_normalizes_over_yes_and_no() -> None:
    assert p_yes({" yes": math.log(0.6), "Yes": math.log(0.1), " no": math.log(0.1), "x": 0.0}, None) == (
        pytest.approx(0.875)
    )
    assert p_yes({"x": -1.0}, None) is None
    assert set(REASONS) == {"truncated", "missing_verdict", "invalid_verdict"}
    assert all(missing_help(c) == [] for c in JUDGE_CONFIGS)


def write_annotations(root: Path) -> list[str]:
    identity = {"step": "verbal_annotation", "version": f"{VERSION}+w120-r20-f0.8", "model": "teacher"}
    records = []
    for i, (q, title, doc, comment, score) in enumerate(PAIRS):
        output = {"question_id": f"q{i}", "question": q, "doc_id": f"d{i}", "doc_title": title,
                  "doc_text": doc, "relevance": None, "comment": comment, "score": score,
                  "score_logprob": -0.1, "score_logprobs": None}  # fmt: skip
        records.append({"key": f"ann{i}", "input": {"question_id": f"q{i}", "doc_id": f"d{i}"}, **identity,
                        "output": output})  # fmt: skip
    with ShardStore(root, ShardSpec(), identity) as store:
        store.append(records, [])
    return [r["key"] for r in records]


def test_judge_run_and_export_keeps_approved(smollm2_path, tmp_path, capsys) -> None:
    keys = write_annotations(tmp_path / "ann")
    judged = tmp_path / "judge"
    argv = ["judge", "--annotation_dir", str(tmp_path / "ann"), "--output_dir", str(judged)]
    argv += [
        "--backend",
        "hf",
        "--max_tokens",
        "40",
        "--progress",
        "false",
        "--few_shot",
        "--prefill",
        "Verdict:",
    ]
    assert run_command("annotate", argv) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["processed"] == 4
    assert "annotations approved" in captured.err
    verdicts = approvals(str(judged))
    assert set(verdicts) <= set(keys)
    for record in load_accepted(judged):
        assert isinstance(record["approved"], bool) and record["input"]["annotation_key"] in keys
        assert record["p_yes"] is None or 0.0 <= record["p_yes"] <= 1.0
    for record in load_rejected(judged):
        assert record["reason"] in REASONS
    card = (judged / "README.md").read_text()
    assert summary["accepted"] == 0 or "### `approved`" in card  # the approval rate: a value-count table


def test_export_keeps_only_approved(tmp_path, capsys) -> None:
    keys = write_annotations(tmp_path / "ann")
    identity = {"step": "verbal_judge", "version": "verbal_judge_v1", "model": "judge"}
    verdicts = {keys[0]: True, keys[1]: False, keys[2]: True}  # keys[3]: not judged
    with ShardStore(tmp_path / "judge", ShardSpec(), identity) as store:
        store.append(
            [{"key": f"j{k}", "input": {"annotation_key": k}, **identity, "output": {"approved": ok}}
             for k, ok in verdicts.items()], [],
        )  # fmt: skip
    assert approvals(str(tmp_path / "judge")) == verdicts
    sft = tmp_path / "sft"
    argv = ["export-sft", "--input_dir", str(tmp_path / "ann"), "--output_dir", str(sft)]
    assert (
        run_command("annotate", [*argv, "--judge_dir", str(tmp_path / "judge"), "--validation_fraction", "0"])
        == 0
    )
    rows = [json.loads(line) for line in (sft / "train.jsonl").read_text().splitlines()]
    assert sorted(r["doc_id"] for r in rows) == ["d0", "d2"]
    assert "2 approved, 1 not approved, 1 not judged" in capsys.readouterr().err


def test_judge_prompt_shows_the_annotation() -> None:
    item = {"annotation_key": "k", "question_id": "q", "question": "Who?", "doc_id": "d", "doc_title": "T",
            "doc_text": "Some text.", "comment": "Says who.", "score": 4}  # fmt: skip
    content = AnnotationJudgeStep().prompt(item).messages[-1]["content"]
    assert "Who?" in content and "Some text." in content and "Comment: Says who.\nScore: 4" in content
    assert AnnotationJudgeStep().key(item) == {"annotation_key": "k"}


def test_the_old_name_of_the_annotation_judge_still_imports():
    from r3forge.annotate import AnnotationJudgeStep as new
    from r3forge.annotate import JudgeStep as old

    assert old is new
