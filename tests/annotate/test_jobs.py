"""The annotation jobs end to end: the CPU recipe (its own `vllm serve`, started and stopped by the job) and
config errors."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from r3forge.annotate.cli import main as annotate_cli
from r3forge.annotate.teacher import TeacherConfig
from r3forge.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_serve_needs_the_openai_backend() -> None:
    with pytest.raises(ConfigError, match="serve: true needs backend: openai"):
        TeacherConfig(backend="hf", serve=True)


def test_unknown_subcommand_and_help(capsys) -> None:
    assert annotate_cli(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("verbal", "judge", "paraphrase", "report", "export-sft"))
    with pytest.raises(ConfigError, match="unknown subcommand"):
        annotate_cli(["verbl"])


@pytest.mark.slow
def test_cpu_recipe_starts_and_stops_its_server(shared_data, smollm2_path, tmp_path, capsys) -> None:
    """configs/annotate/verbal_hotpotqa_cpu.yaml, shrunk to 6 pairs (~90 s: the server start dominates)."""
    qa = shared_data / "hotpotqa" / "rpt_distractor_dev_sample_dev.jsonl"
    log = tmp_path / "server.log"
    argv = [
        "verbal",
        "--config",
        str(REPO / "configs/annotate/verbal_hotpotqa_cpu.yaml"),
        "--qa_path",
        str(qa),
    ]
    argv += ["--max_questions", "2", "--max_docs_per_question", "3", "--output_dir", str(tmp_path / "out")]
    argv += ["--serve_log", str(log)]
    assert annotate_cli(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["processed"] == 6
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["pairs"] == 6 and report["questions_with_gold"] >= 1 and "ndcg@2" in report
    assert log.stat().st_size > 0  # the job's own server wrote its log there
    assert not [p for p in psutil.Process().children(recursive=True) if p.is_running()]  # and was stopped
