"""configs/grpo/agent_qwen2.5-3b.yaml, its header run as written on loopback: the reranker student released
by the header's `r3forge export` (the tier's reranker SFT run) and served under `verbal-reranker-1.5b`, the
e5 retriever, the header's closed-book filter (vLLM's engine in this process, the embedded model for Qwen),
the CPU recipe's format warm start of the embedded model (`warm_start`: the policy, GRPO's
`model_name_or_path`), then `accelerate launch ... -m r3forge.agent.grpo` on one CPU process: 1 GRPO step of
one group of G = 5
rollouts (per-device 5 x grad-accum 1; the as-written 640 per step is checked in test_headers.py),
`use_vllm: false` (TRL's colocated vLLM needs CUDA), fp32; every other key as written (n = 15 retrieved,
top-3 shown, 4 turns of 500 tokens, 4096-token rollouts, beta 0.001, epsilon 0.2, temperature 1.0, lr 5e-7,
gradient checkpointing, TensorBoard)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from transformers import AutoModelForCausalLM

from .conftest import (
    CPU_ACCELERATE,
    CPU_TRAINING,
    NQ_FLASHRAG,
    flag,
    override_flags,
    read_jsonl,
    run_command,
    write_jsonl,
)
from .headers import CONFIGS, header_command, served_model

CONFIG = "grpo/agent_qwen2.5-3b.yaml"
G = 5
WARMSTART_QUESTIONS = 16


@pytest.mark.slow
def test_grpo_paper_config_runs(
    sft_run, retriever_url, llm_server, hotpot, shared_data, smollm2_path, paper_root
):
    logs = paper_root / "logs"
    # the reranker: the header's export of its SFT run, then its server command
    release = paper_root / "release" / "verbal_reranker_qwen2.5-1.5b"
    export = header_command(CONFIG, "r3forge", "export")
    run_command([*export, *override_flags(run=sft_run("verbal_reranker_qwen2.5-1.5b.yaml")[0], out=release)],
                logs / "export-reranker.log")  # fmt: skip
    reranker = llm_server(served_model(header_command(CONFIG, "launch/serve_vllm.sh"), str(release)))
    assert reranker.model_name == "verbal-reranker-1.5b"

    # the training questions: NQ + HotpotQA (FlashRAG rows), then the header's closed-book filter
    mixed = paper_root / "data" / "nq_hotpotqa_train.jsonl"
    write_jsonl(mixed, read_jsonl(shared_data / NQ_FLASHRAG) + read_jsonl(hotpot["train"]))
    filtered = paper_root / "data" / "nq_hotpotqa_train_filtered.jsonl"
    closed_book = header_command(CONFIG, "r3forge", "data", "filter-closed-book")
    assert flag(closed_book, "--backend") == "vllm"
    stats = run_command([*closed_book, *override_flags(qa_path=mixed, output=filtered, model=smollm2_path)],
                        logs / "filter-closed-book.log", 1200)  # fmt: skip
    kept = read_jsonl(filtered)
    assert kept and len(kept) <= 29 and f'"written": {len(kept)}' in stats
    policy = warm_start(filtered, retriever_url, reranker.base_url, release, paper_root)

    out = paper_root / "grpo" / "agent_qwen2.5-3b"
    launch = header_command(CONFIG, "accelerate", "launch")
    launch = [CPU_ACCELERATE if t == flag(launch, "--config_file") else t for t in launch]
    launch += override_flags(dataset=filtered, model_name_or_path=policy, retriever_url=retriever_url,
                             reranker_base_url=reranker.base_url, reranker_tokenizer=release, output_dir=out,
                             max_steps=1, per_device_train_batch_size=G, gradient_accumulation_steps=1,
                             use_vllm=False, **CPU_TRAINING)  # fmt: skip
    run_command(launch, logs / "grpo.log", 3000)

    values = yaml.safe_load((CONFIGS / CONFIG).read_text())
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    for key in ("num_generations", "epsilon", "beta", "temperature", "learning_rate", "warmup_steps",
                "lr_scheduler_type", "max_completion_length", "num_retrieve", "num_shown", "max_turns",
                "max_turn_tokens", "max_obs_tokens", "observation", "reranker_model", "reranker_max_tokens",
                "reranker_backend", "gradient_checkpointing", "vllm_mode", "heldout_fraction", "seed"):  # fmt: skip
        assert resolved[key] == values[key], key
    assert resolved["steps_per_generation"] == resolved["gradient_accumulation_steps"] == 1  # TRL's default
    assert resolved["generation_batch_size"] == G

    rollouts = read_jsonl(out / "rollouts.jsonl")
    assert len(rollouts) == G and all(r["tokens"] > 0 for r in rollouts)
    assert all(
        r["tokens"] <= values["max_completion_length"] and r["turns"] <= values["max_turns"] + 1
        for r in rollouts
    )
    steps = [e for e in read_jsonl(out / "metrics.jsonl") if "reward" in e]
    assert [e["step"] for e in steps] == [1]
    step = steps[0]
    assert 0.0 <= step["agent/masked_fraction"] <= 1.0 and "kl" in step and "agent/searches" in step
    metrics = json.loads((out / "final_metrics.json").read_text())
    assert metrics["logged_steps"] == 1 and metrics["env"]["queries"] == sum(
        len(r["searches"]) for r in rollouts
    )
    # the warm-started policy searches: the retriever's top-15 went through the served reranker
    assert metrics["env"]["queries"] > 0 and metrics["env"]["reranker_pairs"] > 0
    assert step["agent/masked_fraction"] > 0  # observation tokens are not the policy's
    assert AutoModelForCausalLM.from_pretrained(out / "final").num_parameters() > 100e6
    assert json.loads((out / "run.json").read_text())["finished"]


def warm_start(questions: Path, retriever_url: str, reranker_url: str, release: Path, root: Path) -> Path:
    """The format warm start a 135M policy needs to write `<search>` at all (configs/sft/agent_warmstart_cpu.yaml,
    the CPU recipe's; without it the policy searched in none of its rollouts): worked trajectories of the
    training questions with this config's observations (its retriever, reranker, n, k), then 3 epochs of SFT.
    Returns the warm-started model folder, GRPO's `model_name_or_path` here."""
    values = yaml.safe_load((CONFIGS / CONFIG).read_text())
    rows, run = root / "data" / "warmstart.jsonl", root / "sft" / "agent_warmstart"
    env = {k: values[k] for k in ("observation", "num_retrieve", "num_shown", "reranker_model",
                                  "reranker_max_tokens", "heldout_fraction")}  # fmt: skip
    flags = [f for k, v in env.items() for f in (f"--{k}", str(v))]
    run_command(["r3forge", "data", "agent-warmstart", "--dataset", str(questions), "--retriever_url", retriever_url,
                 "--reranker_base_url", reranker_url, "--reranker_tokenizer", str(release), *flags,
                 "--max_questions", str(WARMSTART_QUESTIONS), "--output", str(rows)],
                root / "logs" / "warmstart-data.log")  # fmt: skip
    assert len(read_jsonl(rows)) == WARMSTART_QUESTIONS
    run_command(["r3forge", "sft", "--config", "configs/sft/agent_warmstart_cpu.yaml", "--dataset", str(rows),
                 "--output_dir", str(run), "--num_train_epochs", "3"], root / "logs" / "warmstart-sft.log")  # fmt: skip
    return run / "final"
