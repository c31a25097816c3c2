"""The run folder of a training recipe, and what goes into it besides checkpoints:

    <output_dir>/run.json            recipe, task, base model, datasets, LoRA or not, git commit, versions, times
    <output_dir>/config.yaml         the resolved config (every field of every config class)
    <output_dir>/metrics.jsonl       one JSON object per logging / evaluation event
    <output_dir>/final_metrics.json  train + eval metrics, and the task metrics before and after training
    <output_dir>/checkpoint-N/       Trainer checkpoints (resume_from_checkpoint: auto picks the last complete
                                     one; `checkpoints.py`)
    <output_dir>/final/              the trained model (or LoRA adapter) + tokenizer: what `r3forge export` reads

Plus `owner.json` (`r3forge.runfolder`: the recipe and the settings that decide the trained model). A folder of
another command or trained with other settings is refused before anything loads, and one that already holds
this run is never overwritten silently: resume it or pass overwrite (the old contents move aside).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import transformers
import trl
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

import r3forge
from r3forge.config import resolved, where
from r3forge.data.jsonio import append_jsonl
from r3forge.errors import ConfigError
from r3forge.precision import cpu_model
from r3forge.runfolder import claim, move_aside, settings
from r3forge.training.checkpoints import (
    checkpoint_problem,
    latest_complete_checkpoint,
    read_state,
    roll_back_metrics,
)
from r3forge.training.cpu import CPUSettings

AUTO = ("auto", "true", "latest", "last")
# the TrainingArguments / SFTConfig / GRPOConfig fields that decide the trained model: a resume must keep them.
# The others may change between the runs of one folder: max_steps / num_train_epochs (a resume may extend
# them), logging, saving and evaluation cadence, dataloader, precision-of-kernels and distributed knobs.
_TRAINED_BY = (
    "learning_rate lr_scheduler_type lr_scheduler_kwargs warmup_steps warmup_ratio weight_decay adam_beta1 "
    "adam_beta2 adam_epsilon optim optim_args max_grad_norm seed data_seed per_device_train_batch_size "
    "gradient_accumulation_steps bf16 fp16 label_smoothing_factor neftune_noise_alpha max_length packing "
    "packing_strategy padding_free completion_only_loss assistant_only_loss loss_type dataset_text_field "
    "truncation_mode chat_template_path shuffle_dataset beta epsilon epsilon_high delta num_generations "
    "num_iterations temperature top_p top_k min_p repetition_penalty max_completion_length "
    "importance_sampling_level mask_truncated_completions scale_rewards reward_weights steps_per_generation "
    "entropy_coef disable_dropout sync_ref_model ref_model_mixup_alpha ref_model_sync_steps"
)
TRAINED_BY = tuple(_TRAINED_BY.split())
# script / model fields that only say how fast or how much memory a run takes
SPEED_ONLY = ("attn_implementation", "save_rollouts", *(f.name for f in dataclasses.fields(CPUSettings)))
# script fields that only decide what the held-out evaluation reads: the trained model is the same, so a
# resume may change them (recorded in owner.json; the metrics rows before the resume used the old values)
EVAL_ONLY = ("max_eval_samples", "task_eval_samples", "task_eval_batch_size", "task_eval_at_start")


def git_commit(path: Path | None = None) -> str | None:
    """HEAD of the git checkout holding `path` (default: the r3forge sources), or None (a wheel install)."""
    where = path or Path(r3forge.__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def prepare_output_dir(
    output_dir: str, resume: str | None, overwrite: bool, model_only: bool = False
) -> str | None:
    """The checkpoint to resume from (None: start fresh), after checking the folder.

    `resume`: empty (fresh start; a folder holding a run is refused unless `overwrite`, which moves it aside),
    "auto" (the last complete checkpoint-N, newer incomplete ones moved aside; a fresh start when there is
    none), or a checkpoint path (refused when incomplete). When resuming, metrics.jsonl is rolled back to
    the checkpoint (`checkpoints.py`). `model_only`: the run's checkpoints hold no optimizer state
    (save_only_model). Only the main process (RANK 0 or unset) renames or rewrites anything.
    """
    out = Path(output_dir)
    main = os.environ.get("RANK", "0") == "0"
    if resume:
        if resume.lower() in AUTO:
            chosen = latest_complete_checkpoint(out, model_only, move_aside=main)
        elif problem := checkpoint_problem(Path(resume), model_only):
            raise ConfigError(f"resume_from_checkpoint: {resume} is not a complete checkpoint ({problem})")
        else:
            chosen = Path(resume)
        if main:
            roll_back_metrics(out / "metrics.jsonl", read_state(chosen) if chosen else None)
        return str(chosen) if chosen else None
    last = get_last_checkpoint(str(out)) if out.is_dir() else None
    held = out.is_dir() and ((out / "run.json").exists() or last is not None)
    if held and not overwrite:
        raise ConfigError(
            f"{out}: holds a run (run.json or checkpoint-N); set resume_from_checkpoint: auto to continue it, "
            "overwrite: true to delete it and start over, or choose another output_dir"
        )
    if held and main:
        move_aside(out)  # never deleted
    return None


def claim_run(recipe: str, configs: Sequence[Any], training: Any, overwrite: bool) -> None:
    """Claim `training.output_dir` for `recipe` (`r3forge.runfolder`): the fields of `configs` (script and
    model arguments) and the `TRAINED_BY` fields of `training` are its settings. A folder of another command
    or of other settings is refused unless `overwrite`, which moves it aside."""
    trained_by = {k: getattr(training, k) for k in TRAINED_BY if hasattr(training, k)}
    wanted = settings([*configs, trained_by], drop=SPEED_ONLY)
    claim(
        training.output_dir,
        recipe,
        wanted,
        overwrite,
        legacy=("run.json", "config.yaml", "checkpoint-*"),
        free=EVAL_ONLY,
    )


def run_info(recipe: str, task: str, base_model: str, datasets: list[str], lora: bool) -> dict[str, Any]:
    return {
        "recipe": recipe,
        "task": task,
        "base_model": base_model,
        "base_model_id": base_model if "/" in base_model and not Path(base_model).exists() else None,
        "datasets": datasets,
        "lora": lora,
        "git_commit": git_commit(),
        "r3forge_version": r3forge.__version__,
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
        },
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "finished": None,
    }


def precision_info(training: Any) -> dict[str, Any]:
    """What a run trains in and why (run.json's "precision"): `bf16: auto` resolved by `r3forge.precision`
    where the config said auto; the device it trains on names the CPU or GPU."""
    gpu = torch.cuda.is_available() and not getattr(training, "use_cpu", False)
    dtype = "bf16" if training.bf16 else "fp16" if training.fp16 else "fp32"
    return {
        "mixed_precision": dtype,
        "bf16": bool(training.bf16),
        "set_by": where(training, "bf16"),
        "auto": resolved(training).get("bf16"),
        "device": f"cuda: {torch.cuda.get_device_name(0)}" if gpu else f"cpu: {cpu_model()}",
    }


def precision_line(info: dict[str, Any]) -> str:
    """One log line: 'precision: fp32 on cpu: AMD EPYC (flag '--bf16' (auto -> False: ...))'."""
    return f"precision: {info['mixed_precision']} on {info['device']} ({info['set_by']})"


class MetricsJSONL(TrainerCallback):
    """Append every logged dict (loss, learning rate, eval metrics, task metrics) with its step and epoch."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            row = {"step": state.global_step, "epoch": state.epoch, **logs}
            append_jsonl(self.path, [row])
