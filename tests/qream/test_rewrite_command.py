"""`r3forge rewrite`: rows, fallbacks and the report on hand-made data; QREAM-ICL and the FT prompt path end
to end with the embedded model behind the session's real vLLM server; demos that clash with targets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r3forge.cli import main as r3forge_main
from r3forge.config import missing_help
from r3forge.qream.rewrite import FT_INSTRUCTION, FTRewriteStep, ft_prompt, rewrite_item
from r3forge.qream.rewrite_command import REWRITE_CONFIGS, add_answers, evidence_rows, rewrite_report
from r3forge.qream.score import candidate_key
from r3forge.synth.store import record_files

TARGETS = [
    {"id": "a", "question": "Who wrote Hamlet?", "answers": ["William Shakespeare"]},
    {"id": "b", "question": "Where is the Louvre?", "answers": ["Paris"]},
]
EVIDENCE = {
    "a": {"raw": "Hamlet: a tragedy by William Shakespeare. Other text here.", "rewrite": "Shakespeare wrote it.",
          "evidence": "Shakespeare wrote it.", "fallback": ""},
    "b": {"raw": "The Louvre is a museum in Paris.", "rewrite": None, "evidence": "The Louvre is a museum in Paris.",
          "fallback": "too_short"},
}  # fmt: skip


def _key(target: dict, round: int, document: str) -> tuple:
    item = {"question_id": target["id"], "question": target["question"], "answers": target["answers"]}
    return tuple(candidate_key(item | {"round": round, "document": document}).values())


def test_rows_fallbacks_and_report() -> None:
    assert all(missing_help(c) == [] for c in REWRITE_CONFIGS)
    rows = evidence_rows(TARGETS, EVIDENCE, tokenizer=None)
    assert [(r["tk_raw"], r["tk_rewrite"]) for r in rows] == [(9, 3), (7, 7)]  # words without a tokenizer
    answers = {
        _key(TARGETS[0], 0, EVIDENCE["a"]["raw"]): "Shakespeare",
        _key(TARGETS[0], 1, EVIDENCE["a"]["rewrite"]): "William Shakespeare",
        _key(TARGETS[1], 0, EVIDENCE["b"]["raw"]): "Paris",
    }
    add_answers(rows, answers)
    assert rows[0]["f1_raw"] == pytest.approx(2 / 3) and rows[0]["em_rewrite"] == 1.0
    assert rows[1]["answer_rewrite"] == "Paris" == rows[1]["answer_raw"]  # fallback: the raw answer again
    report = rewrite_report(rows, "icl", "m")
    assert report["rewritten"] == 1 and report["fallbacks"] == {"too_short": 1}
    assert report["f1_raw"] == pytest.approx((2 / 3 + 1) / 2, abs=1e-4) and report["f1_rewrite"] == 1.0
    assert report["tk_ratio"] == pytest.approx(10 / 16)
    assert "f1_raw" not in rewrite_report(evidence_rows(TARGETS, EVIDENCE, None), "icl", "m")


@pytest.fixture(scope="module")
def base_argv(vllm_server, shared_data: Path, smollm2_path: Path) -> list[str]:
    argv = ["rewrite", "--qa_path", str(shared_data / "hotpotqa" / "rpt_distractor_dev_sample_dev.jsonl")]
    argv += ["--max_questions", "3", "--top_k", "2", "--max_tokens", "120", "--reader_few_shot"]
    argv += ["--backend", "openai", "--base_url", vllm_server.base_url, "--model", vllm_server.model_name]
    argv += [
        "--tokenizer",
        str(smollm2_path),
        "--batch_size",
        "8",
        "--concurrency",
        "2",
        "--progress",
        "false",
    ]
    return argv


def test_icl_rewrite_and_reader_comparison(base_argv, shared_data: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "icl"
    seeds = str(shared_data / "hotpotqa" / "rpt_distractor_dev_sample_train.jsonl")
    argv = [*base_argv, "--seed_qa_path", seeds, "--num_seeds", "1", "--seed_words", "40"]
    assert r3forge_main([*argv, "--output_dir", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    rows = [json.loads(line) for line in (out / "evidence.jsonl").read_text().splitlines()]
    assert report["questions"] == len(rows) == 3 and report["method"] == "icl"
    assert report["rewritten"] + sum(report["fallbacks"].values()) == 3
    for r in rows:
        assert r["raw"].count("\n\n") == 1  # top-2 passages
        assert r["answer_raw"] is not None and 0.0 <= r["f1_rewrite"] <= 1.0 and r["tk_raw"] > 0
        assert (r["rewrite"] is None) == bool(r["fallback"])
    assert report["f1_raw"] == pytest.approx(sum(r["f1_raw"] for r in rows) / 3, abs=1e-4)
    assert (out / "seeds" / "manifest.json").is_file() and (out / "reader" / "manifest.json").is_file()

    # the same questions with the demos of that run: cached rewrites, identical evidence
    again = tmp_path / "again"
    assert (
        r3forge_main([*base_argv, "--demos_from", str(out), "--output_dir", str(again), "--no_evaluate"]) == 0
    )
    rows_again = [json.loads(line) for line in (again / "evidence.jsonl").read_text().splitlines()]
    assert [r["rewrite"] for r in rows_again] == [r["rewrite"] for r in rows]
    assert "f1_raw" not in json.loads((again / "report.json").read_text())

    # a demo whose question is a target: refused before any request
    clash = [*base_argv, "--qa_path", seeds, "--demos_from", str(out), "--output_dir", str(tmp_path / "x")]
    clash[clash.index("--max_questions") + 1] = "1000"
    capsys.readouterr()
    assert r3forge_main(clash) == 1 and "also target questions" in capsys.readouterr().err


def test_ft_method_prompts_with_the_sft_instruction(base_argv, tmp_path: Path) -> None:
    out = tmp_path / "ft"
    assert r3forge_main([*base_argv, "--method", "ft", "--output_dir", str(out), "--no_evaluate"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["method"] == "ft" and report["questions"] == 3
    records = [
        json.loads(x) for p in record_files(out / "rewrite", "accepted") for x in p.read_text().splitlines()
    ]
    assert len(records) == 3 and all(r["step"] == "qream_ft_rewrite" for r in records)
    item = rewrite_item({"id": "q", "question": "Who?"}, "Some: retrieved text.", 1)
    content = FTRewriteStep().prompt(item).messages[0]["content"]
    assert content == ft_prompt("Who?", "Some: retrieved text.") and content.startswith(FT_INSTRUCTION)


def test_icl_without_demos_is_an_error(tmp_path: Path, capsys) -> None:
    assert r3forge_main(["rewrite", "--qa_path", "x.jsonl", "--output_dir", str(tmp_path)]) == 1
    assert "demos_from" in capsys.readouterr().err
