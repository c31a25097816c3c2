"""The annotation jobs end to end: the CPU recipe (its own `vllm serve`, started and stopped by the job) and
config errors."""

from __future__ import annotations

import json
import sys
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


def test_slurm_launcher_assembles_a_valid_shard_command() -> None:
    import shlex
    import subprocess

    from r3forge.annotate.jobs import VERBAL_CONFIGS
    from r3forge.config import parse_config

    env = {"PATH": "/usr/bin:/bin", "DRY_RUN": "1", "SHARDS": "4", "SHARD": "2", "PYTHON": sys.executable}
    config = "configs/annotate/verbal_nq_gptoss120b.yaml"
    done = subprocess.run(
        ["bash", "launch/annotate_slurm.sh", config, "--top_n", "20"],
        cwd=REPO, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    serve, annotate = [shlex.split(line[2:].rstrip(" &")) for line in done.stderr.splitlines()[-2:]]
    assert serve[-4:] == ["launch/serve_vllm.sh", "openai/gpt-oss-120b", "--tensor-parallel-size", "4"]
    assert annotate[1:5] == ["-m", "r3forge", "annotate", "verbal"]
    pairs, _, _, run, _ = parse_config(VERBAL_CONFIGS, annotate[5:])
    assert (run.shard, run.output_dir, pairs.top_n) == ("2/4", "runs/annotate/verbal_nq_gptoss120b/s2", 20)
