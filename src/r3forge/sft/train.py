"""The parts `recipes/sft.py` is built from (the recipe itself reads top to bottom there): loading one split
of prompt/completion rows, the student in its training precision, the DeepSpeed launch check and what the
engine ran.
"""

from __future__ import annotations

import ctypes
import os
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import datasets
import torch
import trl.kernels.chunked_logprob as trl_logprob
import trl.trainer.utils as trl_utils
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import ModelConfig, SFTConfig, SFTTrainer

from r3forge.data.rows import load_rows
from r3forge.errors import ConfigError
from r3forge.models import resolve_model

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


def model_dtype(model_args: ModelConfig, training: Any) -> torch.dtype:
    """`dtype: auto` (or unset): bf16 when training in bf16 on a GPU, else fp32."""
    if model_args.dtype and model_args.dtype != "auto":
        return getattr(torch, model_args.dtype)
    return torch.bfloat16 if training.bf16 and torch.cuda.is_available() else torch.float32


def load_model(model_args: ModelConfig, training: Any) -> tuple[str, Any, Any]:
    """(base name, model, tokenizer) of a training run: an embedded name (default SmolLM2), a local folder or
    a Hub id, in the training precision (`model_dtype`); the tokenizer pads with EOS when it has no pad."""
    base = model_args.model_name_or_path or "smollm2-135m-instruct"
    path = resolve_model(base)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=model_dtype(model_args, training),
                                                 attn_implementation=model_args.attn_implementation)  # fmt: skip
    return base, model, tokenizer


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def bound_cpu_heap(threshold: int = 1 << 20) -> bool:
    """On glibc (Linux), serve allocations of `threshold` bytes and more with mmap, which returns them to the
    OS when freed. glibc's default raises that threshold after each free up to 32 MiB, and the variable-length
    batches of a CPU run then fragment the heap: `configs/sft/verbal_reranker_cpu.yaml` (135M, batch 8, bf16)
    grew to 14 GiB RSS by step 62 without this, and stayed at 4-8 GiB with it; each step is ~1.33x slower
    (`tests/benchmarks/bench_cpu_heap.py`), so the recipe sets it only with `bound_cpu_heap: true`. A user's
    own `MALLOC_MMAP_THRESHOLD_` is left alone. Returns whether the threshold was set."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is not None or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # musl and other C libraries: nothing to set
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))


def compact_cpu_lm_head() -> bool:
    """Make TRL's fused LM head score only the labelled positions on CPU too.

    `SFTTrainer` (trl 1.16) projects the hidden states through the LM head in tiles and, on CUDA/XPU, only
    where the next-token label is not -100; elsewhere it scores every position (fixed tile shapes for
    compiled backends such as Neuron) and masks afterwards. In completion-only SFT on an eager CPU that is
    every prompt token too: for the verbal reranker (~220 prompt + ~30 completion tokens per row) the
    49k-vocabulary head in fp32 tiles was half of each step. The loss, its gradient and the logged entropy /
    token accuracy are the same sums over the same labelled positions either way (tests/sft/test_train.py);
    the step takes ~0.4x the time (`tests/benchmarks/bench_sft_lm_head.py`). Only TRL's compaction check is
    widened (its kernel choice, Triton or torch tiles, is a separate check and stays). Returns whether it
    was applied (False on a TRL without that check, or when already applied)."""
    decide = getattr(trl_utils, "_use_triton", None)
    if decide is None or hasattr(decide, "r3forge_original"):
        return False

    def compact(device: torch.device) -> bool:
        return device.type == "cpu" or decide(device)

    compact.r3forge_original = decide  # type: ignore[attr-defined]  # TRL's own check (process-wide patch)
    trl_utils._use_triton = compact
    return True


def cpu_lm_head_tiles(tokens: int, vocab: int) -> bool:
    """Tile TRL's fused LM head in `[tokens, vocab]` blocks instead of its `[4096, 32768]` (trl 1.16), for CPU.

    The kernel holds one fp32 tile and, on devices without Triton, several tile-sized temporaries while it
    folds it (forward) or turns it into the logits gradient (backward). With TRL's tile that is +4.9 GiB for
    4,800 scored positions of SmolLM2's 49k vocabulary, the largest part of the GRPO CPU recipe's 11.5 GiB
    peak; a [512, 4096] tile needs +0.4 GiB and is no slower on 2 cores, and the log-probabilities agree to
    float rounding (`tests/sft/test_train.py`, `tests/benchmarks/bench_memory_grpo.py`). Process-wide; the
    recipes call it only without CUDA. Returns whether it was applied (False on a TRL without those tiles)."""
    if not (hasattr(trl_logprob, "TOKEN_CHUNK_SIZE") and hasattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE")):
        return False
    trl_logprob.TOKEN_CHUNK_SIZE = tokens  # positions per tile (read at each call)
    trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = vocab  # vocabulary columns per tile (passed at each call)
    return True


def apply_cpu_settings(script: Any) -> None:
    """Without CUDA, a training script's CPU settings (the SFT and GRPO scripts' fields of these names):
    `compact_cpu_lm_head` (the head scores only the completion tokens: ~0.4x the SFT step time, and less
    memory), `cpu_lm_head_tile_tokens` / `cpu_lm_head_tile_vocab` (the head's tile, so its memory stays
    bounded) and `bound_cpu_heap` (RSS stays flat over variable-length batches and rollouts, at ~1.1-1.3x the
    step time). Process-wide; nothing on a CUDA machine."""
    if torch.cuda.is_available():
        return
    if script.compact_cpu_lm_head:
        compact_cpu_lm_head()
    cpu_lm_head_tiles(script.cpu_lm_head_tile_tokens, script.cpu_lm_head_tile_vocab)
    if script.bound_cpu_heap:
        bound_cpu_heap()


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
    info: dict[str, Any] = {"type": acc.distributed_type.value, "num_processes": acc.num_processes,
                            "backend": acc.state.backend, "device": str(acc.device)}  # fmt: skip
    engine = trainer.model_wrapped
    if trainer.is_deepspeed_enabled and hasattr(engine, "zero_optimization_stage"):
        # an offload config (or None); its device a plain string or a str enum, by DeepSpeed version
        offload = [getattr(o.device, "value", o.device) if o else "none"
                   for o in (engine.zero_offload_optimizer(), engine.zero_offload_param())]  # fmt: skip
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
