"""The GPU check's own logic, on the CPU (default suite): without CUDA `pytest -m gpu tests/gpu` exits 0 with
one SKIP line per check; its world setup runs and feeds the benchmarks' loaders; the SFT and GRPO command
lines it launches parse (with the device flags set to CPU ones: a machine without CUDA refuses bf16)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from r3forge.config import parse_config

REPO = Path(__file__).resolve().parents[2]
CHECKS = ("bf16 SFT", "vLLM CUDA parity hf / engine / server", "GRPO colocated vLLM + env_mask",
          "bench annotate pipeline/sequential", "bench IGP probes batched/one-by-one")  # fmt: skip
CPU = ["--bf16", "false", "--use_cpu", "true"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the checks run for real (make test-gpu)")
def test_gpu_check_skips_cleanly_without_cuda():
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "tests/gpu", "-p", "no:cacheprovider", "-q"]
    out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    section = out.stdout.split("r3forge GPU check", 1)[1].splitlines()
    reason = " SKIP (no CUDA device: torch.cuda.is_available() is False)"
    assert [line.removesuffix(reason) for line in section if line.endswith(reason)] == list(CHECKS)
    assert "total" not in out.stdout  # nothing ran, so no time line


def test_world_feeds_the_benchmarks_and_the_command_lines_parse(
    gpu_world, repo_module, sft_command, grpo_command
):
    # lazy: TRL is slow to import, and `pytest -m gpu tests/gpu` collects this module too
    from r3forge.agent.config import GRPO_CONFIGS, PAPER_DEFAULTS
    from r3forge.sft.config import SFT_CONFIGS

    rows = [json.loads(line) for line in gpu_world["warmstart"].read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 60 and all(row["prompt"] and row["completion"] for row in rows)
    igp = repo_module("tests/benchmarks/bench_igp_probes.py")
    questions, passages = igp.load_questions(str(gpu_world["hf_questions"]), 5)  # 1 warm-up + Q = 4
    assert len(questions) == 5 and all(len(p) == igp.N for p in passages)
    annotate = repo_module("tests/benchmarks/bench_annotate_throughput.py")
    assert len(annotate.pairs(gpu_world["hf_questions"], 64)) == 64

    script, model, sft = parse_config(SFT_CONFIGS, sft_command[1:] + CPU)
    assert (
        Path(script.dataset) == gpu_world["warmstart"] and model.model_name_or_path == "smollm2-135m-instruct"
    )
    assert (sft.max_steps, sft.per_device_train_batch_size, sft.logging_steps) == (16, 8, 1)
    # parsed as `r3forge grpo` does, less `check_models`: the policy it names is the SFT command's output
    _, search, env, _, model, grpo = parse_config(
        GRPO_CONFIGS, grpo_command[1:] + CPU, defaults=PAPER_DEFAULTS
    )
    assert (grpo.use_vllm, grpo.vllm_mode, grpo.vllm_gpu_memory_utilization) == (True, "colocate", 0.3)
    assert grpo.vllm_enable_sleep_mode  # as configs/grpo/agent_qwen2.5-3b.yaml: the rollouts must wake it
    assert (grpo.max_steps, grpo.num_generations, grpo.per_device_train_batch_size) == (2, 4, 8)
    assert env.observation == "verbal" and Path(search.index) == gpu_world["index"]
    assert (search.reranker_serve, search.reranker_gpu_memory_utilization) == (True, 0.15)
    assert Path(model.model_name_or_path) == Path(sft.output_dir) / "final"
