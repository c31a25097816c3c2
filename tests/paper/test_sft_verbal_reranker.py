"""configs/sft/verbal_reranker_qwen2.5-{1.5b,3b}.yaml: the header's `accelerate launch ... -m r3forge.sft`
on one CPU process (conftest `sft_run`): the embedded SmolLM2 as the student, 2 optimizer steps of
per-device 4 x grad-accum 1 (the as-written 4 x 8 x 4 GPUs = 128 is checked in test_headers.py), fp32; every
other key as written: lr 1e-5 cosine, warmup ratio 0.05, max length 2048, gradient checkpointing, eval and
save steps, TensorBoard, task metrics of 160 new tokens in batches of 32."""

from __future__ import annotations

import json

import pytest
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from .conftest import read_jsonl
from .headers import CONFIGS

AS_WRITTEN = ("learning_rate", "lr_scheduler_type", "warmup_steps", "max_length", "gradient_checkpointing",
              "per_device_train_batch_size", "per_device_eval_batch_size", "eval_strategy", "eval_steps",
              "save_steps", "save_total_limit", "logging_steps", "seed", "num_train_epochs", "attn_implementation",
              "task", "task_eval_max_new_tokens", "task_eval_batch_size")  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("config", ["verbal_reranker_qwen2.5-1.5b.yaml", "verbal_reranker_qwen2.5-3b.yaml"])
def test_verbal_reranker_sft_runs(config, sft_run, verbal_sft_data):
    out, _ = sft_run(config)
    values = yaml.safe_load((CONFIGS / "sft" / config).read_text())
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    for key in AS_WRITTEN:
        assert resolved[key] == values[key], key
    assert resolved["report_to"] == [values["report_to"]] and resolved["bf16"] is False
    assert resolved["completion_only_loss"] is True  # the prompt never counts in the loss

    run = json.loads((out / "run.json").read_text())
    assert run["recipe"] == "sft" and run["task"] == "verbal" and run["finished"]
    metrics = json.loads((out / "final_metrics.json").read_text())
    assert metrics["train_loss"] > 0 and metrics["eval_loss"] > 0
    before, after = metrics["task_before"], metrics["task_after"]
    assert before["step"] == 0 and after["step"] == 2  # task metrics before the first step and at the end
    assert 0.0 <= after["eval_task_parse_rate"] <= 1.0
    events = read_jsonl(out / "metrics.jsonl")
    assert any("eval_loss" in e for e in events) and any("eval_task_parse_rate" in e for e in events)
    task_eval = sorted((out / "task_eval").glob("step_*.jsonl"))
    assert [p.name for p in task_eval] == ["step_000000.jsonl", "step_000002.jsonl"]
    assert all(r["text"] is not None and r["teacher_score"] in range(1, 6) for r in read_jsonl(task_eval[-1]))
    assert list((out / "runs").glob("*/events.out.tfevents.*")) or list(out.rglob("events.out.tfevents.*"))

    final = out / "final"
    tokenizer = AutoTokenizer.from_pretrained(final)
    model = AutoModelForCausalLM.from_pretrained(final)
    assert model.num_parameters() > 100e6 and tokenizer.chat_template
