"""The annotation jobs end to end: the CPU recipe (its own `vllm serve`, started and stopped by the job) and
config errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil
import pytest

from r3forge.backends.open import LLMConfig
from r3forge.cli import main, run_command
from r3forge.errors import ConfigError
from r3forge.runfolder import RunFolderError

REPO = Path(__file__).resolve().parents[2]


def test_serve_needs_the_openai_backend() -> None:
    with pytest.raises(ConfigError, match="serve: true needs backend: openai"):
        LLMConfig(backend="hf", serve=True)


def test_unknown_subcommand_and_help(capsys) -> None:
    assert main(["annotate", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("verbal", "judge", "paraphrase", "qream", "report", "export-sft"))
    assert main(["annotate", "verbl"]) == 2
    assert "unknown subcommand 'verbl'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="unknown subcommand 'annotate verbl'"):
        run_command("annotate", ["verbl"])


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
    assert run_command("annotate", argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["processed"] == 6
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["pairs_requested"] == report["pairs_annotated"] == 6 and report["pairs_failed"] == 0
    assert report["questions_with_gold"] >= 1 and "ndcg@2" in report
    assert "expected_ndcg@2" in report  # the digit logprobs of the score token were recorded
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


def test_a_second_checkpoint_named_final_is_not_served_the_first_ones_records(
    two_checkpoints, tmp_path
) -> None:
    """Annotating with `b/final` into the folder `a/final` filled is refused before the model loads (the
    folder's owner.json), naming both identities (the records were once keyed `final` for both, and the
    second run returned the first's as cached)."""
    from r3forge.data.synth_world import SynthWorldConfig, generate_world

    world = generate_world(SynthWorldConfig(seed=0, num_passages=60, num_questions=4, output_dir="unused"))
    qa = tmp_path / "questions"
    world.questions.select(range(1)).save_to_disk(str(qa))
    out = tmp_path / "out"
    base = ["verbal", "--qa_path", str(qa), "--pairing", "own", "--max_docs_per_question", "2", "--backend", "hf",
            "--max_tokens", "8", "--output_dir", str(out), "--progress", "false"]  # fmt: skip
    a, b = two_checkpoints
    assert run_command("annotate", [*base, "--model", str(a)]) == 0
    first = json.loads((out / "manifest.json").read_text())["model"]
    assert first.startswith("final@")
    with pytest.raises(RunFolderError, match=rf"model: '{first}' there vs 'final@[0-9a-f]{{12}}' here"):
        run_command("annotate", [*base, "--model", str(b)])
    assert run_command("annotate", [*base, "--model", str(b), "--output_dir", str(tmp_path / "out_b")]) == 0
    second = json.loads((tmp_path / "out_b" / "manifest.json").read_text())["model"]
    assert second.startswith("final@") and second != first
