"""The SFT recipe's configs: TRL's own `SFTConfig` (every `TrainingArguments` field: output_dir, learning
rate, batch sizes, bf16, gradient checkpointing, eval/save steps, report_to, resume_from_checkpoint, ...) and
`ModelConfig` (model_name_or_path, dtype, use_peft, lora_r, ...), plus the script's data and task-evaluation
arguments. One YAML sets fields of all three; unknown keys are errors.

    script, model, training = parse_config(SFT_CONFIGS, ["--config", "configs/sft/verbal_reranker_cpu.yaml"])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from trl import ModelConfig, SFTConfig

from r3forge.training.cpu import CPUSettings

TASKS = ("verbal", "qream", "generic")


@dataclass
class SFTScriptArguments(CPUSettings):
    """The SFT script's own fields (data, task metrics, overwrite) and the CPU settings (`CPUSettings`)."""

    dataset: str = field(
        metadata={
            "help": "Prompt/completion chat data: a DatasetDict folder (annotate export-sft / rules, the "
            "sft/ folder of annotate qream) or a .jsonl / .json file (all rows train)."
        }
    )
    train_split: str = field(default="train", metadata={"help": "Split of `dataset` to train on."})
    eval_split: str = field(
        default="validation", metadata={"help": "Held-out split for eval loss and task metrics; empty: none."}
    )
    eval_dataset: str = field(
        default="", metadata={"help": "Held-out data from another folder/file instead of `eval_split`."}
    )
    task: Literal["verbal", "qream", "generic"] = field(
        default="generic",
        metadata={
            "help": "Task metrics during eval: verbal (parse rate, score accuracy, Spearman vs teacher, "
            "NDCG vs gold), qream (reader F1 with the student's rewrites), generic (loss only)."
        },
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use the first N training rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use the first N held-out rows."})
    task_eval_samples: int = field(
        default=200, metadata={"help": "Held-out rows the student generates on for task metrics (0: off)."}
    )
    task_eval_max_new_tokens: int = field(
        default=128, metadata={"help": "Generation length for task metrics."}
    )
    task_eval_batch_size: int = field(
        default=16, metadata={"help": "Prompts per generate call in task eval."}
    )
    task_eval_at_start: bool = field(
        default=True, metadata={"help": "Also compute task metrics before the first step (the 'before' row)."}
    )
    reader_model: str = field(
        default="smollm2-135m-instruct",
        metadata={
            "help": "qream: the fixed reader answering from the student's rewrites (name or folder).",
            "model": (),
        },
    )
    reader_few_shot: bool = field(default=True, metadata={"help": "qream: two short-answer demos first."})
    overwrite: bool = field(
        default=False,
        metadata={
            "help": "Start over in an output_dir holding another run (else: resume_from_checkpoint or refuse)."
        },
    )


SFT_CONFIGS = (SFTScriptArguments, ModelConfig, SFTConfig)
