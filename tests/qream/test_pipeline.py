"""`r3forge annotate qream` end to end on HotpotQA with the embedded model behind the session's real vLLM
server: every stage's folder, candidates with scores, the golden set, SFT data, report and card; a rerun
resumes with nothing left to do and the same outputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from r3forge.backends.open import LLMConfig
from r3forge.cli import run_command
from r3forge.config import missing_help
from r3forge.errors import ConfigError
from r3forge.qream.pipeline import QREAM_CONFIGS, QreamModelsConfig, role
from r3forge.qream.score import lexical_support
from r3forge.qream.select import hard_filter
from r3forge.synth import load_accepted
from r3forge.text import complete_sentences


def test_roles_default_to_the_rewriter() -> None:
    teacher = LLMConfig(backend="openai", model="m", base_url="http://a/v1", serve=True)
    assert role(teacher, QreamModelsConfig(), "reader") is teacher
    judge = role(teacher, QreamModelsConfig(judge_model="j", judge_base_url="http://b/v1"), "judge")
    assert (judge.model, judge.base_url, judge.serve) == ("j", "http://b/v1", False)
    assert all(missing_help(c) == [] for c in QREAM_CONFIGS)


@pytest.fixture(scope="module")
def qream_run(vllm_server, shared_data: Path, smollm2_path: Path, tmp_path_factory) -> tuple[list[str], Path]:
    out = tmp_path_factory.mktemp("qream") / "run"
    argv = ["qream", "--qa_path", str(shared_data / "hotpotqa" / "rpt_distractor_dev_sample_dev.jsonl")]
    argv += ["--seed_qa_path", str(shared_data / "hotpotqa" / "rpt_distractor_dev_sample_train.jsonl")]
    argv += ["--max_questions", "4", "--num_seeds", "2", "--rounds", "2", "--prefix_tokens", "40"]
    argv += ["--top_k", "2", "--rewrite_max_tokens", "160", "--max_facts", "4", "--seed_words", "50"]
    argv += ["--backend", "openai", "--base_url", vllm_server.base_url, "--model", vllm_server.model_name]
    argv += ["--tokenizer", str(smollm2_path), "--output_dir", str(out), "--batch_size", "16"]
    argv += ["--concurrency", "2", "--progress", "false"]
    assert run_command("annotate", argv) == 0
    return argv, out


def test_pipeline_outputs(qream_run, capsys) -> None:
    _, out = qream_run
    for stage in ("seeds", "round1", "round2", "reader", "facts", "fact_judge"):
        assert (out / stage / "manifest.json").is_file(), stage
    rows = [json.loads(line) for line in (out / "candidates.jsonl").read_text().splitlines()]
    report = json.loads((out / "report.json").read_text())
    assert report["candidates"] == len(rows) > 0 and report["questions"] == 4
    assert report["golden"] + sum(report["dropped"].values()) == 4
    for r in rows:
        assert r["round"] in (1, 2) and 0.0 <= r["s_perf"] <= 1.0 and 0.0 <= r["s_fact"] <= 1.0
        assert r["s_total"] == pytest.approx((r["s_perf"] + r["s_fact"]) / 2)
        assert not r["golden"] or r["passes"]  # dual selection: only filter-passing candidates are golden
    golden = [json.loads(line) for line in (out / "golden.jsonl").read_text().splitlines()]
    assert len(golden) == report["golden"] == len({g["question_id"] for g in golden})
    sft = [json.loads(line) for p in (out / "sft").glob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(sft) == len(golden)
    assert all("Retrieved text:" in s["prompt"][0]["content"] for s in sft)
    assert "# QREAM golden rewrites" in (out / "README.md").read_text()
    assert report["s_orient_raw"] < 0 and report["s_orient_candidates"] < 0  # mean log-probabilities
    assert all(r["s_orient"] < 0 for r in rows)


def test_rerun_resumes_with_the_same_outputs(qream_run, capsys) -> None:
    argv, out = qream_run
    before = (out / "candidates.jsonl").read_text()
    capsys.readouterr()
    assert run_command("annotate", argv) == 0
    err = capsys.readouterr().err
    assert "0 pending" in err and " pending;" not in err.replace("0 pending", "")  # every stage: all cached
    assert (out / "candidates.jsonl").read_text() == before


def test_lexical_fact_judge_reuses_every_model_stage(qream_run, tmp_path, capsys) -> None:
    argv, out = qream_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("fact_judge"))
    argv = [*argv[: argv.index("--output_dir") + 1], str(copy), *argv[argv.index("--output_dir") + 2 :]]
    capsys.readouterr()
    assert (
        run_command(
            "annotate", [*argv, "--fact_judge", "lexical", "--lexical_threshold", "0.5", "--echo_guard"]
        )
        == 0
    )
    assert "0 pending" in capsys.readouterr().err and not (copy / "fact_judge").exists()
    report = json.loads((copy / "report.json").read_text())
    assert report["fact_judge"] == "lexical" and report["echo_guard"] is True
    for r in map(json.loads, (copy / "candidates.jsonl").read_text().splitlines()):
        assert r["supported"] == [lexical_support(f, r["raw"], 0.5) for f in r["facts"]]
        assert r["passes"] == hard_filter(r["answer"] or "", r["answers"], r["question"])
    with pytest.raises(ConfigError, match="lexical_threshold"):
        run_command("annotate", [*argv, "--fact_judge", "lexical", "--lexical_threshold", "2"])


def test_dry_run_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="dry_run"):
        run_command("annotate", ["qream", "--qa_path", "x", "--output_dir", str(tmp_path), "--dry_run"])


def test_probability_fact_judge_rethresholds_cached_verdicts(qream_run, tmp_path, capsys) -> None:
    argv, out = qream_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    argv = [*argv[: argv.index("--output_dir") + 1], str(copy), *argv[argv.index("--output_dir") + 2 :]]
    assert run_command("annotate", [*argv, "--fact_judge", "prob", "--judge_tau", "0.3"]) == 0
    assert (copy / "fact_judge_prob" / "manifest.json").is_file()
    rows = [json.loads(line) for line in (copy / "candidates.jsonl").read_text().splitlines()]
    judged = {(r["question_id"], r["round"]): r for r in load_accepted(copy / "fact_judge_prob")}
    assert any(r["facts"] for r in rows)
    for r in rows:
        if r["facts"]:
            probs = judged[(r["question_id"], r["round"])]["p_yes"]
            assert len(probs) == len(r["facts"]) and all(p is None or 0.0 <= p <= 1.0 for p in probs)
            assert r["supported"] == [p is not None and p >= 0.3 for p in probs]
    capsys.readouterr()
    assert run_command("annotate", [*argv, "--fact_judge", "prob", "--judge_tau", "1.0"]) == 0
    assert "0 pending" in capsys.readouterr().err  # a new tau re-thresholds the cache, no new requests
    rows = [json.loads(line) for line in (copy / "candidates.jsonl").read_text().splitlines()]
    assert all(r["supported"] == [p is not None and p >= 1.0 for p in judged[(r["question_id"], r["round"])]["p_yes"]]
               for r in rows if r["facts"])  # fmt: skip


def test_extractive_teacher_through_the_dual_criteria(qream_run, tmp_path) -> None:
    argv, _ = qream_run
    out = tmp_path / "extractive"
    argv = [*argv[: argv.index("--output_dir") + 1], str(out), *argv[argv.index("--output_dir") + 2 :]]
    assert run_command("annotate", [*argv, "--rewriter", "extractive", "--fact_judge", "lexical"]) == 0
    assert not (out / "seeds").exists() and not (out / "round1").exists()  # no rewriter model calls
    rows = [json.loads(line) for line in (out / "candidates.jsonl").read_text().splitlines()]
    report = json.loads((out / "report.json").read_text())
    assert rows and report["rewriter"] == "extractive"
    for r in rows:  # every sentence is r_raw's, and round 2 keeps more than round 1
        body = " ".join(r["raw"].split())
        kept = [s for p in r["document"].split("\n\n") for s in complete_sentences(p.partition(": ")[2] or p)]
        assert kept and all(s.strip() in body for s in kept)
    by_q: dict[str, dict[int, str]] = {}
    for r in rows:
        by_q.setdefault(r["question_id"], {})[r["round"]] = r["document"]
    assert all(len(d[2]) > len(d[1]) for d in by_q.values() if 2 in d)
