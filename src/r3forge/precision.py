"""What this machine computes fast: `bf16: auto` resolves here (`r3forge.config` calls `auto_bf16` for a
config whose `bf16` is `auto`, the CPU configs' default).

bf16 autocast pays only where the hardware has bf16 units: a GPU that supports bf16 (Ampere and newer), or a
CPU with `avx512_bf16` / `amx_bf16` (x86: Intel Cooper Lake, Sapphire Rapids and newer; AMD Zen 4 and newer)
or `bf16` (aarch64: ARMv8.6, e.g. Graviton3). Elsewhere torch emulates it: on a 2-core AMD EPYC with AVX2
only, one bf16 matmul [512, 576] x [576, 1536] under CPU autocast took 829 ms against 22 ms in fp32 (38x), so
`auto` trains in fp32 there.

    auto_bf16({"use_cpu": True})  # (False, 'CPU AMD EPYC: no bf16 units (flags: no avx512_bf16, amx_bf16)')

The detection reads /proc/cpuinfo (Linux); elsewhere the CPU counts as one without bf16 units. The
environment variable R3FORGE_CPU_BF16=1 or 0 overrides it (a CPU whose flags the hypervisor hides; tests).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from r3forge.errors import ConfigError

ENV = "R3FORGE_CPU_BF16"
CPUINFO = Path("/proc/cpuinfo")
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 AVX512, x86 AMX, aarch64 (ARMv8.6 "Features")


def cpu_model(cpuinfo: Path = CPUINFO) -> str:
    """The CPU's model name ('AMD EPYC', 'Intel(R) Xeon(R) Platinum 8480+'), or the machine type."""
    for line in _read(cpuinfo).splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "CPU part") and value.strip():
            return value.strip()
    return os.uname().machine if hasattr(os, "uname") else "unknown CPU"


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str]:
    """The first processor's feature flags (x86 `flags`, aarch64 `Features`); empty without /proc/cpuinfo."""
    for line in _read(cpuinfo).splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def cpu_bf16(cpuinfo: Path = CPUINFO) -> tuple[bool, str]:
    """(whether this CPU has bf16 units, a line that says which CPU and why).

    >>> import os; os.environ["R3FORGE_CPU_BF16"] = "0"; cpu_bf16()
    (False, 'R3FORGE_CPU_BF16=0 in the environment')
    >>> del os.environ["R3FORGE_CPU_BF16"]
    """
    forced = os.environ.get(ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1", f"{ENV}={forced} in the environment"
    if forced:
        raise ConfigError(f"environment variable {ENV}: expected 1 or 0, got {forced!r}")
    units = sorted(cpu_flags(cpuinfo) & set(BF16_FLAGS))
    model = cpu_model(cpuinfo)
    if units:
        return True, f"CPU {model}: bf16 units ({', '.join(units)})"
    return False, f"CPU {model}: no bf16 units (flags: no {', '.join(BF16_FLAGS[:2])})"


def auto_bf16(values: dict[str, Any]) -> tuple[bool, str]:
    """`bf16: auto` of a training config, from its other values (`use_cpu`, `fp16`, `deepspeed`): bf16 on a
    GPU that supports it and on a CPU with bf16 units, fp32 elsewhere. Returns (bf16, why)."""
    if values.get("fp16"):
        return False, "fp16: true"
    launcher = os.environ.get("ACCELERATE_MIXED_PRECISION", "")
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true" and launcher in ("bf16", "no"):
        return launcher == "bf16", f"DeepSpeed takes the launcher's precision (--mixed_precision {launcher})"
    if not values.get("use_cpu") and torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        if torch.cuda.is_bf16_supported():
            return True, f"GPU {name}: bf16 supported"
        return False, f"GPU {name}: no bf16 support"
    if values.get("deepspeed") or os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return False, "DeepSpeed on CPU trains in fp32 (sft/train.py: check_deepspeed_launch)"
    return cpu_bf16()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
