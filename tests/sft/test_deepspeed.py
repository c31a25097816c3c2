"""DeepSpeed under the SFT recipe, on this CPU: configs/accelerate/zero2.yaml, zero3.yaml and zero3_offload.yaml
with 2 processes (gloo) against a single-process run of the same global batch and steps.

The fixed CPU overrides: `accelerate launch --num_processes 2 --mixed_precision no` (the configs say 4 GPUs,
bf16) and the CPU SFT configs' own `use_cpu: true`, `bf16: auto` (under DeepSpeed: the launcher's `no`);
everything else as the configs say.

Default suite (fast): deepspeed imports with its CPU accelerator; each accelerate config resolves, through
accelerate's launcher and the Trainer's own fill, to a DeepSpeed config that DeepSpeed accepts, with the
recipe's batch arithmetic (train_batch_size = per-device x accumulation x processes); the configs' stated
global batch and host memory agree with that arithmetic and DeepSpeed's own estimate; the recipe refuses the
launches that would fail later with a cryptic error.

Slow: the three 2-process runs. Each must run under the DeepSpeed engine (run.json `distributed`, read from
the engine), log the single-process losses, save a consolidated fp32 `final/` (ZeRO-3: gathered at save, no
empty placeholders) that transformers loads, and give the single-process final model's logits within
LOGITS_ATOL. Measured here (SmolLM2-135M, 3 steps, lr 1e-4, fp32, global batch 4): losses 4.153 -> 2.282 ->
1.151 in all four runs (within 4e-6); logits max |diff| vs one process 8.7e-5 (ZeRO-2, per-device 1 x
accumulation 2), 5.9e-5 (ZeRO-3), 1.2e-4 (ZeRO-3 offload), while training moved them by 5.6 from the base
model. The three runs take about 9 min on 2 cores (the first offload run also JIT-builds cpu_adam, ~1 min).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch
import yaml
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils import DeepSpeedPlugin
from accelerate.utils.launch import prepare_deepspeed_cmd_env
from deepspeed.runtime.config import DeepSpeedConfig
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig, unset_hf_deepspeed_config

from r3forge.config import parse_config
from r3forge.errors import ConfigError
from r3forge.sft.config import SFT_CONFIGS
from r3forge.sft.train import check_deepspeed_launch

REPO = Path(__file__).resolve().parents[2]
ACCEL = REPO / "configs" / "accelerate"
ZERO = ("zero2.yaml", "zero3.yaml", "zero3_offload.yaml")
CPU_SFT = REPO / "configs" / "sft" / "verbal_reranker_cpu.yaml"
# fp32 logits of the 2-process final model vs the single-process one. Not a summation-order bound alone: the
# two runs reduce gradients in other orders (per rank, then all-reduce), and Adam divides by sqrt(v), so a
# gradient element within rounding of 0 can step by up to 2·lr differently in each run; that has no closed
# form. Measured <= 1.2e-4 (above); 1e-3 is 8x that and 1/5600 of what training moves them (5.6, asserted
# > 100x). A gradient left on one rank or averaged twice moves them by a good part of that (> 1e-1).
LOGITS_ATOL = 1e-3
STEPS, GLOBAL_BATCH = 3, 4

ROWS = [
    {"prompt": [{"role": "user", "content": f"Is document {i} about question {i // 4}?"}],
     "completion": [{"role": "assistant", "content": f"Comment: It names item {i}.\nScore: {1 + i % 5}"}],
     "question_id": f"q{i // 4}", "doc_id": f"d{i}", "score": 1 + i % 5, "relevance": int(i % 5 == 4)}
    for i in range(24)
]  # fmt: skip


def launch_env(name: str, *flags: str) -> dict[str, str]:
    """The ACCELERATE_* variables `accelerate launch --config_file configs/accelerate/<name> <flags>` gives
    its training processes, computed by accelerate's own launcher code (as `launch_command` does)."""
    argv = ["--config_file", str(ACCEL / name), "--main_process_port", "0", *flags, "-m", "r3forge.sft"]
    args, defaults, mp_from_config = _validate_launch_command(launch_command_parser().parse_args(argv))
    fields = [*defaults.deepspeed_config, *(["mixed_precision"] if mp_from_config else [])]
    args.deepspeed_fields_from_accelerate_config = ",".join(fields)
    _, env = prepare_deepspeed_cmd_env(args)
    return {k: v for k, v in env.items() if k.startswith("ACCELERATE_") and os.environ.get(k) != v}


def launch_line(sft_config: Path) -> str | None:
    """The accelerate config an SFT config's header launches it with (None: it names none)."""
    found = re.search(r"accelerate launch --config_file configs/accelerate/(\S+)", sft_config.read_text())
    return found.group(1) if found else None


PAPER = sorted(p for p in (REPO / "configs" / "sft").glob("*.yaml") if launch_line(p) in ZERO)
PAIRS = [(launch_line(p), p.name) for p in PAPER] + [(name, CPU_SFT.name) for name in ZERO]


# ------------------------------------------------------------------------------------------ default suite
def test_deepspeed_imports_with_its_cpu_accelerator() -> None:
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    from deepspeed.ops.op_builder import CPUAdamBuilder

    major, minor = (int(x) for x in deepspeed.__version__.split(".")[:2])
    assert (0, 17) <= (major, minor) < (0, 20), deepspeed.__version__  # pyproject's bound
    if not torch.cuda.is_available():
        accelerator = get_accelerator()
        assert accelerator.device_name() == "cpu" and accelerator.communication_backend_name() == "gloo"
    assert CPUAdamBuilder().is_compatible(verbose=False)  # offload's DeepSpeedCPUAdam can be JIT-built


def test_paper_configs_launch_under_deepspeed() -> None:
    assert {p.name for p in PAPER} >= {"verbal_reranker_qwen2.5-3b.yaml", "qream_ft_llama3.2-1b.yaml"}


@pytest.mark.parametrize(("accel", "sft"), PAIRS, ids=[f"{a}-{s}" for a, s in PAIRS])
def test_accelerate_config_resolves_with_the_recipe_batch_arithmetic(
    accel: str, sft: str, smollm2_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launched = load_config_from_file(str(ACCEL / accel))
    raw = yaml.safe_load((REPO / "configs" / "sft" / sft).read_text())
    cpu = sft == CPU_SFT.name
    if not cpu:  # as launched on GPUs: the launcher's and the recipe's precision agree
        assert launched.mixed_precision == "bf16" and raw["bf16"] is True
    *_, training = parse_config(
        SFT_CONFIGS, ["--config", str(REPO / "configs" / "sft" / sft), "--bf16", "false"]
    )
    env = launch_env(accel, "--mixed_precision", "no", "--num_processes", "2")
    stage = launched.deepspeed_config["zero_stage"]
    assert env["ACCELERATE_USE_DEEPSPEED"] == "true" and env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == str(stage)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    check_deepspeed_launch(training)  # the CPU overrides pass the recipe's own check
    plugin = DeepSpeedPlugin()  # reads the launcher's variables, as in each training process
    plugin.set_mixed_precision("no")
    config = plugin.deepspeed_config
    # batch sizes, accumulation and clipping left to the recipe: the Trainer fills them, nothing can disagree
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        assert config[key] == "auto", key
    assert config["gradient_clipping"] == "auto"
    zero = config["zero_optimization"]
    assert zero["stage"] == stage and zero["stage3_gather_16bit_weights_on_model_save"] is (stage == 3)
    offload = launched.deepspeed_config["offload_optimizer_device"]
    assert zero["offload_optimizer"]["device"] == zero["offload_param"]["device"] == offload
    with torch.device(
        "meta"
    ):  # the embedded model's shapes, no weights; built before the fill registers ZeRO-3
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(smollm2_path))
    try:
        filled = HfTrainerDeepSpeedConfig(config)
        filled.trainer_config_process(training)  # the Trainer's own fill, at this process's world size
        filled.trainer_config_finalize(training, model, num_training_steps=10)
        resolved = filled.config
    finally:
        unset_hf_deepspeed_config()  # the fill registers a global ZeRO-3 flag: never leak it to other tests
    per_device, accumulation = training.per_device_train_batch_size, training.gradient_accumulation_steps
    assert resolved["train_micro_batch_size_per_gpu"] == per_device
    assert resolved["gradient_accumulation_steps"] == accumulation
    assert resolved["train_batch_size"] == per_device * accumulation * training.world_size
    assert resolved["gradient_clipping"] == training.max_grad_norm
    ds = DeepSpeedConfig(resolved)  # DeepSpeed's own parser and batch check (micro x accum x world)
    assert ds.zero_optimization_stage == stage and ds.train_batch_size == per_device * accumulation
    # the header's global batch is what the launch gives: per-device x accumulation x the config's processes
    stated = re.search(r"global batch (\d+) = per-device (\d+) x grad-accum (\d+) x (\d+) GPUs",
                       (REPO / "configs" / "sft" / sft).read_text())  # fmt: skip
    if stated:
        total, *factors = (int(x) for x in stated.groups())
        assert factors == [per_device, accumulation, launched.num_processes]
        assert total == per_device * accumulation * launched.num_processes


def test_offload_header_states_deepspeeds_host_memory_estimate(smollm2_path: Path) -> None:
    """zero3_offload.yaml's host-RAM figure is DeepSpeed's own estimate (ZeRO-3, parameters and optimizer
    offloaded, zero.Init, its 1.5x buffer), here for the embedded model's parameter count."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(smollm2_path))
    params = sum(p.numel() for p in model.parameters())  # tied embeddings once: parameters() deduplicates
    largest = max(p.numel() for p in model.parameters())
    gpus = load_config_from_file(str(ACCEL / "zero3_offload.yaml")).num_processes
    host, _, _ = estimate_zero3_model_states_mem_needs(params, largest, num_gpus_per_node=gpus, num_nodes=1)
    stated = re.search(r"~(\d+) bytes/param of host RAM", (ACCEL / "zero3_offload.yaml").read_text())
    assert stated and int(stated.group(1)) == round(host / params)


def test_the_recipe_refuses_deepspeed_launches_that_would_fail_later(monkeypatch: pytest.MonkeyPatch) -> None:
    # use_cpu: true, bf16 false (the file's auto would follow the launcher, set below only)
    *_, training = parse_config(SFT_CONFIGS, ["--config", str(CPU_SFT), "--bf16", "false"])
    for key, value in launch_env("zero3.yaml", "--num_processes", "2").items():  # the config's bf16 kept
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match=r"--mixed_precision bf16 .* trains in no .*--mixed_precision no"):
        check_deepspeed_launch(training)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    check_deepspeed_launch(training)
    if (
        not torch.cuda.is_available()
    ):  # a GPU config's use_cpu: false on CPU: accelerate would count 1 process
        training.use_cpu = False
        with pytest.raises(
            ConfigError, match="2 DeepSpeed processes without a CUDA device need use_cpu: true"
        ):
            check_deepspeed_launch(training)
        training.ddp_backend = "gloo"
        check_deepspeed_launch(training)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED")
    training.use_cpu, training.ddp_backend = False, None
    check_deepspeed_launch(training)  # not a DeepSpeed launch: nothing to check


# ------------------------------------------------------------------------------------------------- slow
# (accelerate config, per-device batch, accumulation): each a global batch of GLOBAL_BATCH over 2 processes
RUNS = [("zero2.yaml", 1, 2), ("zero3.yaml", 2, 1), ("zero3_offload.yaml", 2, 1)]
PROBE = ["Is document 3 about question 0? Comment: It names item 3.", "Score: 4"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dsdata") / "dsd"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:20]),
                          "validation": datasets.Dataset.from_list(ROWS[20:])}).save_to_disk(str(path))  # fmt: skip
    return path


def recipe_flags(data: Path, model: Path, out: Path, per_device: int, accumulation: int) -> list[str]:
    """The CPU SFT config as written (use_cpu: true; bf16: auto, which under DeepSpeed follows the launcher's
    `no`: fp32), with only data, sizes and logging changed; task metrics on (ZeRO-3 generates with the sharded model before the first step and at the end)."""
    return ["--config", str(CPU_SFT), "--dataset", str(data), "--eval_dataset", "", "--eval_split", "validation",
            "--model_name_or_path", str(model), "--output_dir", str(out), "--max_steps", str(STEPS),
            "--per_device_train_batch_size", str(per_device), "--gradient_accumulation_steps", str(accumulation),
            "--learning_rate", "1e-4", "--warmup_steps", "0",
            "--max_length", "64", "--logging_steps", "1", "--eval_strategy", "no", "--save_strategy", "no",
            "--report_to", "none", "--seed", "0", "--task_eval_samples", "4", "--task_eval_max_new_tokens", "8",
            "--task_eval_batch_size", "4"]  # fmt: skip


def run(cmd: list[str], log: Path) -> None:
    env = os.environ | {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    with open(log, "w") as f:
        done = subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=1200)
    assert done.returncode == 0, f"{' '.join(cmd)} failed ({done.returncode}); end of {log}:\n" + "\n".join(
        log.read_text().splitlines()[-40:]
    )


def losses(out: Path) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if "loss" in row]


def logits(folder: Path, tokenizer) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(**tokenizer(PROBE, return_tensors="pt", padding=True)).logits


def tensors(folder: Path) -> dict[str, tuple[torch.dtype, tuple[int, ...], float]]:
    """name -> (dtype, shape, sum of |w|) of every tensor in a folder's safetensors files."""
    out = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(file, "pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                t = f.get_tensor(key)
                out[key] = (t.dtype, tuple(t.shape), float(t.abs().sum()))
    return out


@pytest.fixture(scope="module")
def single(data: Path, smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One process, the whole global batch on it: the reference run."""
    out = tmp_path_factory.mktemp("single") / "run"
    run([sys.executable, "-m", "r3forge.sft", *recipe_flags(data, smollm2_path, out, GLOBAL_BATCH, 1)],
        out.parent / "log.txt")  # fmt: skip
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("accel", "per_device", "accumulation"), RUNS, ids=[r[0] for r in RUNS])
def test_two_process_deepspeed_run_matches_the_single_process_run(
    accel: str,
    per_device: int,
    accumulation: int,
    data: Path,
    smollm2_path: Path,
    single: Path,
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ACCEL / accel),
              "--num_processes", "2", "--mixed_precision", "no", "--main_process_port", "0", "-m", "r3forge.sft"]  # fmt: skip
    run([*launch, *recipe_flags(data, smollm2_path, out, per_device, accumulation)], tmp_path / "log.txt")

    # it ran under the DeepSpeed engine, with the recipe's batch arithmetic
    dist = json.loads((out / "run.json").read_text())["distributed"]
    config = load_config_from_file(str(ACCEL / accel)).deepspeed_config
    assert (dist["type"], dist["num_processes"], dist["backend"]) == ("DEEPSPEED", 2, "gloo")
    ds = dist["deepspeed"]
    assert ds["zero_stage"] == config["zero_stage"]
    assert ds["offload_optimizer"] == ds["offload_param"] == config["offload_optimizer_device"]
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (
        per_device,
        accumulation,
    )
    assert ds["train_batch_size"] == per_device * accumulation * 2 == GLOBAL_BATCH
    assert ds["optimizer"] == ("DeepSpeedCPUAdam" if config["offload_optimizer_device"] == "cpu" else "AdamW")

    # the loss goes down, step for step as in one process
    got, want = losses(out), losses(single)
    print(f"{accel}: losses {got} (one process: {want})")
    assert len(got) == len(want) == STEPS and got[-1] < got[0]
    assert got == pytest.approx(want, rel=1e-3)  # measured within 1e-6 relative; steps 2-3 as LOGITS_ATOL
    final = json.loads((out / "final_metrics.json").read_text())
    assert final["task_before"]["step"] == 0 and final["task_after"]["step"] == STEPS

    # final/ is one consolidated fp32 checkpoint: every tensor of the model, full-sized and not empty
    base, saved = tensors(smollm2_path), tensors(out / "final")
    assert set(base) <= set(saved), sorted(set(base) - set(saved))
    for key, (_, shape, _) in base.items():
        dtype, saved_shape, mass = saved[key]
        assert (dtype, saved_shape) == (torch.float32, shape) and mass > 0, key
    _, info = AutoModelForCausalLM.from_pretrained(out / "final", output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"], info

    # and it computes what the single-process final model computes
    tokenizer = AutoTokenizer.from_pretrained(single / "final")
    ref, base_logits, ours = (logits(p, tokenizer) for p in (single / "final", smollm2_path, out / "final"))
    diff, moved = (ours - ref).abs().max().item(), (ref - base_logits).abs().max().item()
    print(
        f"{accel}: logits max |diff| vs one process {diff:.2e} (tolerance {LOGITS_ATOL}); moved {moved:.2f}"
    )
    assert moved > 100 * LOGITS_ATOL  # training changed the model: the comparison can tell runs apart
    assert diff <= LOGITS_ATOL
