"""The SFT-only parts `recipes/sft.py` is built from (the recipe itself reads top to bottom there; what GRPO
shares is in `r3forge.training`): loading one split of prompt/completion rows, the DeepSpeed launch check and
what the engine ran.
"""

from __future__ import annotations

import os
from importlib.metadata import version
from pathlib import Path
from typing import Any

import datasets
import torch
from trl import SFTConfig, SFTTrainer

from r3forge.data.rows import load_rows
from r3forge.errors import ConfigError

SAVED_FILES = ("dataset_dict.json", "dataset_info.json")  # what Dataset(Dict).save_to_disk writes
TASK_COLUMNS = {"verbal": ("question_id", "doc_id", "score"), "qream": ("question", "answers"), "generic": ()}


def load_split(path: str, split: str, limit: int | None) -> datasets.Dataset:
    """One split of a DatasetDict folder (or a whole .jsonl/.json file, read by `r3forge.data.rows`, whose
    errors name the file:line), checked for prompt/completion."""
    p = Path(path).expanduser()
    if p.is_dir():
        if not any((p / f).is_file() for f in SAVED_FILES):
            raise ConfigError(
                f"dataset {path}: a folder, but not a saved Dataset / DatasetDict (no {SAVED_FILES})"
            )
        data = datasets.load_from_disk(str(p))
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise ConfigError(f"{path}: no split {split!r} (splits: {sorted(data)})")
            data = data[split]
    elif p.suffix in (".jsonl", ".json") and p.is_file():
        data = load_rows(p, ("prompt", "completion"))
    elif not p.exists():
        raise ConfigError(f"dataset {path}: no such file or folder")
    else:
        raise ConfigError(f"dataset {path}: neither a DatasetDict folder nor a .jsonl/.json file")
    missing = {"prompt", "completion"} - set(data.column_names)
    if missing:
        raise ConfigError(
            f"{path} ({split}): missing column(s) {sorted(missing)}; need prompt/completion chat rows"
        )
    return data.select(range(min(limit, len(data)))) if limit is not None else data


def check_deepspeed_launch(training: SFTConfig) -> None:
    """Under `accelerate launch --config_file configs/accelerate/zero*.yaml` (ACCELERATE_USE_DEEPSPEED), refuse
    before loading anything the two settings that stop a DeepSpeed run later with a cryptic error: a mixed
    precision of the launcher that the recipe's `bf16`/`fp16` do not match (DeepSpeed's config takes it from
    the launcher), and, without CUDA and with several processes, neither `use_cpu: true` nor
    `ddp_backend: gloo` (accelerate then counts one process and DeepSpeed stops on train_batch_size !=
    micro batch x accumulation x world size). On CPU DeepSpeed runs with `use_cpu: true` (gloo), `bf16: false`
    and `accelerate launch --mixed_precision no`."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() != "true":
        return
    cpu = "on CPU: accelerate launch --mixed_precision no ... --use_cpu true --bf16 false"
    launcher = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    recipe = "bf16" if training.bf16 else "fp16" if training.fp16 else "no"
    if launcher != recipe:
        raise ConfigError(
            f"accelerate launch --mixed_precision {launcher} (the accelerate config's mixed_precision) but the "
            f"SFT config trains in {recipe} (bf16: {training.bf16}, fp16: {training.fp16}): DeepSpeed would "
            f"refuse the mismatch; set both alike ({cpu})"
        )
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if (
        world > 1
        and not torch.cuda.is_available()
        and not training.use_cpu
        and training.ddp_backend != "gloo"
    ):
        raise ConfigError(
            f"{world} DeepSpeed processes without a CUDA device need use_cpu: true or ddp_backend: gloo "
            f"(ddp_backend is {training.ddp_backend}; accelerate would count one process) ({cpu})"
        )


def distributed_info(trainer: SFTTrainer) -> dict[str, Any]:
    """How the run was spread over processes (run.json's `distributed`): the accelerator's type, processes and
    backend, and under DeepSpeed what the engine ran (ZeRO stage, offload, batch arithmetic, optimizer)."""
    acc = trainer.accelerator
    info: dict[str, Any] = {
        "type": acc.distributed_type.value,
        "num_processes": acc.num_processes,
        "backend": acc.state.backend,
        "device": str(acc.device),
    }
    engine = trainer.model_wrapped
    if trainer.is_deepspeed_enabled and hasattr(engine, "zero_optimization_stage"):
        # an offload config (or None); its device a plain string or a str enum, by DeepSpeed version
        offload = [
            getattr(o.device, "value", o.device) if o else "none"
            for o in (engine.zero_offload_optimizer(), engine.zero_offload_param())
        ]
        info["deepspeed"] = {
            "version": version("deepspeed"),
            "zero_stage": engine.zero_optimization_stage(),
            "offload_optimizer": offload[0],
            "offload_param": offload[1],
            "train_batch_size": engine.train_batch_size(),
            "train_micro_batch_size_per_gpu": engine.train_micro_batch_size_per_gpu(),
            "gradient_accumulation_steps": engine.gradient_accumulation_steps(),
            "optimizer": type(engine.basic_optimizer).__name__,
        }
    return info
