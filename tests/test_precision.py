"""`bf16: auto`: the CPU's bf16 units read from /proc/cpuinfo (or forced by R3FORGE_CPU_BF16), resolved when a
training config is parsed, and recorded (`config.resolved`, `where`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from r3forge.agent.config import GRPO_CONFIGS, PAPER_DEFAULTS
from r3forge.config import parse_config, resolved, where
from r3forge.errors import ConfigError
from r3forge.precision import auto_bf16, cpu_bf16, cpu_flags, cpu_model
from r3forge.sft.config import SFT_CONFIGS

EPYC_AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse sse2 avx avx2 fma\n"
XEON_AMX = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
GRAVITON3 = "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve bf16 i8mm\nCPU part\t: 0xd40\n"


def cpuinfo(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "units"),
    [(EPYC_AVX2, False), (XEON_AMX, True), (GRAVITON3, True), ("", False)],
    ids=["epyc-avx2", "xeon-amx", "graviton3", "no-cpuinfo"],
)
def test_cpu_bf16_reads_the_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, units: bool
) -> None:
    monkeypatch.delenv("R3FORGE_CPU_BF16", raising=False)
    has, why = cpu_bf16(cpuinfo(tmp_path, text))
    assert has is units
    assert (": bf16 units (" in why) is units and ("no bf16 units" in why) is not units


def test_cpu_model_and_flags(tmp_path: Path) -> None:
    assert cpu_model(cpuinfo(tmp_path, XEON_AMX)) == "Intel(R) Xeon(R) Platinum 8480+"
    assert {"amx_bf16", "avx512_bf16"} <= cpu_flags(cpuinfo(tmp_path, XEON_AMX))
    assert cpu_model(cpuinfo(tmp_path, GRAVITON3)) == "0xd40" and "bf16" in cpu_flags(
        cpuinfo(tmp_path, GRAVITON3)
    )
    assert cpu_flags(tmp_path / "missing") == set()


def test_environment_forces_and_bad_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R3FORGE_CPU_BF16", "1")
    assert cpu_bf16(cpuinfo(tmp_path, EPYC_AVX2))[0] is True
    monkeypatch.setenv("R3FORGE_CPU_BF16", "0")
    assert cpu_bf16(cpuinfo(tmp_path, XEON_AMX))[0] is False
    monkeypatch.setenv("R3FORGE_CPU_BF16", "yes")
    with pytest.raises(ConfigError, match="R3FORGE_CPU_BF16: expected 1 or 0, got 'yes'"):
        cpu_bf16()


def test_auto_bf16_other_settings_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R3FORGE_CPU_BF16", "1")
    assert auto_bf16({"use_cpu": True, "fp16": True}) == (False, "fp16: true")
    assert auto_bf16({"use_cpu": True, "deepspeed": "ds.json"})[0] is False
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    assert auto_bf16({"use_cpu": True}) == (
        False,
        "DeepSpeed takes the launcher's precision (--mixed_precision no)",
    )
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED")
    assert auto_bf16({"use_cpu": True}) == (True, "R3FORGE_CPU_BF16=1 in the environment")


SFT_ARGS = ["--dataset", "x", "--output_dir", "o", "--use_cpu", "true", "--report_to", "none"]


@pytest.mark.parametrize("forced", ["0", "1"])
def test_sft_and_grpo_configs_resolve_auto_each_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forced: str
):
    """The capability forced each way: the CPU job YAMLs' `bf16: auto` becomes bf16 autocast with bf16 units
    and fp32 without, and the config says where the value came from and why."""
    monkeypatch.setenv("R3FORGE_CPU_BF16", forced)
    for name in ("verbal_reranker_world_cpu", "agent_warmstart_cpu", "verbal_reranker_cpu", "qream_ft_cpu"):
        *_, training = parse_config(
            SFT_CONFIGS, ["--config", f"configs/sft/{name}.yaml", "--output_dir", "o"]
        )
        assert training.bf16 is (forced == "1"), name
        assert resolved(training) == {
            "bf16": f"auto -> {forced == '1'} (R3FORGE_CPU_BF16={forced} in the environment)"
        }
        assert where(training, "bf16").startswith(f"configs/sft/{name}.yaml:")
    *_, training = parse_config(SFT_CONFIGS, [*SFT_ARGS, "--bf16", "AUTO"])
    assert training.bf16 is (forced == "1") and "flag '--bf16' (auto -> " in where(training, "bf16")
    grpo_args = [
        "--dataset",
        "x",
        "--index",
        "i",
        "--output_dir",
        "o",
        "--use_cpu",
        "true",
        "--report_to",
        "none",
    ]
    grpo_args += ["--per_device_train_batch_size", "5", "--bf16", "auto"]
    *_, grpo = parse_config(GRPO_CONFIGS, grpo_args, defaults=PAPER_DEFAULTS)
    assert grpo.bf16 is (forced == "1")


def test_explicit_values_stay_and_bad_value_names_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R3FORGE_CPU_BF16", "1")
    *_, training = parse_config(SFT_CONFIGS, [*SFT_ARGS, "--bf16", "false"])
    assert training.bf16 is False and resolved(training) == {}
    with pytest.raises(ConfigError, match=r"argument --bf16: .*maybe.*; or auto"):
        parse_config(SFT_CONFIGS, [*SFT_ARGS, "--bf16", "maybe"])
