"""configs/sft/qream_ft_llama3.2-1b.yaml over the golden rewrites of the tier's QREAM run (conftest
`qream_sft_run`): the header's `accelerate launch ... -m r3forge.sft` on one CPU process, SmolLM2 as the
student and as the fixed reader of the task metric, 2 optimizer steps of per-device 4 x grad-accum 1; every
other key as written (full fine-tuning, max length 4096, 512 new tokens for the task metric, no reader
demos)."""

from __future__ import annotations

import json

import pytest
import yaml
from transformers import AutoTokenizer

from .conftest import read_jsonl
from .headers import CONFIGS

CONFIG = "sft/qream_ft_llama3.2-1b.yaml"


@pytest.mark.slow
def test_qream_ft_sft_runs(qream_sft_run):
    out, _ = qream_sft_run
    values = yaml.safe_load((CONFIGS / CONFIG).read_text())
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    for key in ("task", "task_eval_max_new_tokens", "task_eval_batch_size", "reader_few_shot", "learning_rate",
                "max_length", "gradient_checkpointing", "per_device_train_batch_size", "lr_scheduler_type"):  # fmt: skip
        assert resolved[key] == values[key], key
    assert resolved["use_peft"] is False  # full fine-tuning, as written
    metrics = json.loads((out / "final_metrics.json").read_text())
    assert metrics["train_loss"] > 0 and metrics["task_after"]["step"] == 2
    after = metrics["task_after"]
    assert 0.0 <= after["eval_task_reader_f1"] <= 1.0 and 0.0 <= after["eval_task_reader_f1_golden"] <= 1.0
    rows = read_jsonl(sorted((out / "task_eval").glob("step_*.jsonl"))[-1])
    assert rows and all(
        {"question", "answers", "rewrite", "reader_f1", "reader_f1_golden"} <= set(r) for r in rows
    )
    # final/ holds the weights and the tokenizer: what the rewrite header serves and reads its tokenizer from
    assert (out / "final" / "config.json").is_file() and AutoTokenizer.from_pretrained(out / "final")
    assert not (out / "tokenizer_config.json").exists()  # the run folder itself has none
