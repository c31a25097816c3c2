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

import os
import subprocess
import time
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
from r3forge.folder_settings import TRAINED_BY
from r3forge.precision import cpu_model
from r3forge.runfolder import move_aside
from r3forge.training.checkpoints import (
    checkpoint_problem,
    latest_complete_checkpoint,
    read_state,
    roll_back_metrics,
)

AUTO = ("auto", "true", "latest", "last")
# what a training run writes: a folder of them without owner.json is adopted
RUN_FILES = ("run.json", "config.yaml", "checkpoint-*")


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


def trained_by(training: Any) -> dict[str, Any]:
    """The training arguments that decide the trained model (`folder_settings.TRAINED_BY`), for the folder's claim."""
    return {k: getattr(training, k) for k in TRAINED_BY if hasattr(training, k)}


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
