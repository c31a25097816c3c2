"""Paraphrased-context baseline: the output checks (every reason code), a real run of the embedded model
(one record per document, however many questions retrieved it) and its SFT export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r3forge.annotate.jobs import PARAPHRASE_CONFIGS
from r3forge.annotate.paraphrase import REASONS, ParaphraseChecks, ParaphraseStep, check_paraphrase
from r3forge.backends import HFLocalBackend, HFLocalConfig
from r3forge.backends.base import Choice, GenerationResult, Usage
from r3forge.cli import run_command
from r3forge.config import missing_help
from r3forge.synth import EngineConfig, Rejected, load_accepted, run_step

DOC = "The Eiffel Tower is a wrought-iron lattice tower in Paris, France, completed in 1889 for a fair."
CHECKS = ParaphraseChecks()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            "Paraphrase: Finished in 1889 for a world fair, the Eiffel Tower is an iron lattice tower in Paris.",
            None,
        ),
        ("Paraphrase:   ", "missing_paraphrase"),
        ("Comment: it is relevant.\nScore: 4", "commentary"),
        (
            "Paraphrase: This is relevant to the question: a tower in Paris built in 1889 for a fair.",
            "commentary",
        ),
        ("Paraphrase: A tower.", "too_short"),
        ("Paraphrase: " + "The tower is tall and made of iron. " * 10, "too_long"),
        ("Paraphrase: " + DOC, "unchanged"),
    ],
)
def test_checks(text: str, reason: str | None) -> None:
    out = check_paraphrase(text, DOC, CHECKS)
    assert (out.reason if isinstance(out, Rejected) else None) == reason


def test_truncated_and_config_help() -> None:
    result = GenerationResult([Choice("Paraphrase: The Eiffel", [], [], [], "length")], Usage())
    item = {"doc_id": "d", "doc_title": "Eiffel Tower", "doc_text": DOC}
    assert ParaphraseStep().parse(item, result) == Rejected("truncated", "hit max_tokens=512")
    assert all(missing_help(c) == [] for c in PARAPHRASE_CONFIGS)
    assert set(REASONS) >= {"truncated", "commentary", "unchanged"}


def test_real_run_one_record_per_document(smollm2_path: Path, tmp_path: Path, capsys) -> None:
    docs = [
        ("Eiffel Tower", DOC),
        ("Apollo 11", "Apollo 11 was the spaceflight that first landed humans on the Moon, on 20 July 1969."),
    ]
    items = [
        {"question_id": f"q{q}", "question": "?", "doc_id": f"d{d}", "doc_title": t, "doc_text": x}
        for q in range(3)
        for d, (t, x) in enumerate(docs)
    ]  # 3 questions x the same 2 documents
    backend = HFLocalBackend.from_config(HFLocalConfig(model=str(smollm2_path)))
    config = EngineConfig(output_dir=str(tmp_path / "para"), batch_size=4, progress=False)
    summary = run_step(ParaphraseStep(max_tokens=96), items, backend, config)
    assert summary.processed == 2 and summary.duplicate_inputs == 4
    for record in load_accepted(tmp_path / "para"):
        assert record["paraphrase"] and record["doc_id"] in ("d0", "d1")
    assert summary.accepted >= 1  # greedy on this model: the Apollo paragraph is rewritten, Eiffel copied
    argv = ["export-sft", "--input_dir", str(tmp_path / "para"), "--output_dir", str(tmp_path / "sft")]
    assert run_command("annotate", [*argv, "--validation_fraction", "0"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "sft" / "train.jsonl").read_text().splitlines()]
    assert len(rows) == summary.accepted
    assert all(r["completion"][0]["content"].startswith("Paraphrase: ") for r in rows)
    assert all("Rewrite the following document" in r["prompt"][-1]["content"] for r in rows)
