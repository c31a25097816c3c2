"""A training script's CPU settings (SFT and GRPO include them: `CPUSettings`) and what they do, process-wide,
where no CUDA device is: TRL's fused LM head scoring only the completion tokens in small tiles, and optionally
a glibc heap that returns memory to the OS.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass, field

import torch
import trl.kernels.chunked_logprob as trl_logprob
import trl.trainer.utils as trl_utils


@dataclass(kw_only=True)
class CPUSettings:
    """The CPU fields of a training script's config (flat YAML keys / flags of `r3forge sft` and `r3forge grpo`):
    they decide how fast a step runs and how much memory it takes, never the trained model, so a resume may
    change them (`training/run.py: SPEED_ONLY`)."""

    compact_cpu_lm_head: bool = field(
        default=True,
        metadata={
            "help": "CPU: TRL's fused LM head scores only the completion tokens (as on CUDA) instead of "
            "every position of prompt and completion: same loss and log-probabilities, ~0.4x the SFT "
            "step time and less memory (tests/benchmarks/bench_sft_lm_head.py)."
        },
    )
    cpu_lm_head_tile_tokens: int = field(
        default=512,
        metadata={
            "help": "CPU: positions per tile of TRL's fused LM head (TRL: 4096); with "
            "cpu_lm_head_tile_vocab, the head's transient memory (tests/benchmarks/bench_memory_grpo.py)."
        },
    )
    cpu_lm_head_tile_vocab: int = field(
        default=4096,
        metadata={"help": "CPU: vocabulary columns per tile of TRL's fused LM head (TRL: 32768)."},
    )
    bound_cpu_heap: bool = field(
        default=False,
        metadata={
            "help": "CPU: a fixed 1 MiB glibc mmap threshold, so the heap does not grow over batches and "
            "rollouts of varying length: SFT final RSS 0.25x, peak 0.72x, at 1.33x s/step "
            "(tests/benchmarks/bench_cpu_heap.py); for long runs near the memory limit."
        },
    )


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


def apply_cpu_settings(cpu: CPUSettings) -> None:
    """Without CUDA, a training script's CPU settings:
    `compact_cpu_lm_head` (the head scores only the completion tokens: ~0.4x the SFT step time, and less
    memory), `cpu_lm_head_tile_tokens` / `cpu_lm_head_tile_vocab` (the head's tile, so its memory stays
    bounded) and `bound_cpu_heap` (RSS stays flat over variable-length batches and rollouts, at ~1.1-1.3x the
    step time). Process-wide; nothing on a CUDA machine."""
    if torch.cuda.is_available():
        return
    if cpu.compact_cpu_lm_head:
        compact_cpu_lm_head()
    cpu_lm_head_tiles(cpu.cpu_lm_head_tile_tokens, cpu.cpu_lm_head_tile_vocab)
    if cpu.bound_cpu_heap:
        bound_cpu_heap()
