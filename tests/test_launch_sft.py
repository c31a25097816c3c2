"""The SFT launch files: configs/accelerate/*.yaml (read by accelerate's own loader) and launch/sft_*.sh
(`bash -n`, then DRY_RUN=1 runs in a hermetic PATH with fake GPUs / SLURM variables, their printed commands
fed back to accelerate's and torchrun's own argument parsers). Nothing here imports r3forge.sft."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
from accelerate.utils import DistributedType

REPO = Path(__file__).resolve().parents[1]
ACCEL = REPO / "configs" / "accelerate"
SCRIPTS = ("sft_local.sh", "sft_multinode_slurm.sh", "sft_torchrun.sh")
SFT_CONFIGS = {
    "verbal_reranker_qwen2.5-1.5b.yaml",
    "verbal_reranker_qwen2.5-3b.yaml",
    "qream_ft_llama3.2-1b.yaml",
    "verbal_reranker_cpu.yaml",
}
BASH = shutil.which("bash") or "/bin/bash"
EXTRA = ["--num_train_epochs", "1", "--run_name", "two words"]


def load(name: str) -> ClusterConfig:
    config = load_config_from_file(str(ACCEL / name))
    assert isinstance(config, ClusterConfig)
    return config


# ---------------------------------------------------------------------------------------- accelerate configs
def test_the_six_accelerate_configs_exist() -> None:
    names = {p.name for p in ACCEL.glob("*.yaml")}
    assert names == {
        "cpu.yaml",
        "single_gpu.yaml",
        "multi_gpu.yaml",
        "zero2.yaml",
        "zero3.yaml",
        "zero3_offload.yaml",
    }


@pytest.mark.parametrize("name", sorted(p.name for p in ACCEL.glob("*.yaml")))
def test_accelerate_config_loads_and_its_header_launches_it(name: str) -> None:
    config = load(name)  # accelerate's loader rejects unknown keys
    assert config.num_machines == 1 and config.machine_rank == 0
    first = (ACCEL / name).read_text().splitlines()[0]
    assert first.startswith("# accelerate launch ")
    cmd = shlex.split(first[2:])
    assert cmd[:4] == ["accelerate", "launch", "--config_file", f"configs/accelerate/{name}"]
    assert cmd[4:7] == ["-m", "r3forge.sft", "--config"]
    assert cmd[7].startswith("configs/sft/") and Path(cmd[7]).name in SFT_CONFIGS
    if name != "cpu.yaml":
        assert config.mixed_precision == "bf16" and config.use_cpu is False


def test_cpu_and_single_gpu_are_one_process() -> None:
    cpu, gpu = load("cpu.yaml"), load("single_gpu.yaml")
    assert cpu.distributed_type == gpu.distributed_type == DistributedType.NO
    assert cpu.use_cpu is True and cpu.mixed_precision == "no" and cpu.num_processes == 1
    assert gpu.use_cpu is False and gpu.num_processes == 1


def test_multi_gpu_is_ddp_on_four_gpus() -> None:
    config = load("multi_gpu.yaml")
    assert config.distributed_type == DistributedType.MULTI_GPU
    assert (config.num_processes, config.num_machines, config.deepspeed_config) == (4, 1, {})


@pytest.mark.parametrize(
    ("name", "stage", "offload"),
    [("zero2.yaml", 2, "none"), ("zero3.yaml", 3, "none"), ("zero3_offload.yaml", 3, "cpu")],
)
def test_deepspeed_configs(name: str, stage: int, offload: str) -> None:
    config = load(name)
    ds = config.deepspeed_config
    assert config.distributed_type == DistributedType.DEEPSPEED and config.num_processes == 4
    assert ds["zero_stage"] == stage
    assert ds["offload_optimizer_device"] == ds["offload_param_device"] == offload
    assert ds["deepspeed_multinode_launcher"] == "standard"  # torchrun per node: what the SLURM script runs
    # left to the recipe ("auto"): a value here that disagrees with the recipe's is an error in transformers
    assert "gradient_accumulation_steps" not in ds and "gradient_clipping" not in ds
    if stage == 3:  # one consolidated 16-bit checkpoint, loadable without DeepSpeed
        assert ds["zero3_save_16bit_model"] is True and ds["zero3_init_flag"] is True


# --------------------------------------------------------------------------------------------- the scripts
@pytest.mark.parametrize("script", SCRIPTS)
def test_script_is_valid_bash(script: str) -> None:
    path = REPO / "launch" / script
    text = path.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "\nset -euo pipefail\n" in text
    assert "# usage: " in text.split("set -euo pipefail")[0]
    assert os.access(path, os.X_OK), f"{script} is not executable"
    subprocess.run([BASH, "-n", str(path)], check=True)
    if shutil.which("shellcheck"):
        subprocess.run(["shellcheck", str(path)], check=True)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A PATH with only what the scripts use: no nvidia-smi, scontrol or srun unless a test adds them."""
    path = tmp_path / "bin"
    path.mkdir()
    for tool in ("dirname", "basename", "grep"):
        (path / tool).symlink_to(shutil.which(tool))
    return path


@pytest.fixture
def sft_config(tmp_path: Path) -> Path:
    path = tmp_path / "my sft.yaml"  # a space: paths must survive quoting
    path.write_text("model: tiny\n")
    return path


def fake_gpus(bin_dir: Path, n: int) -> None:
    lines = " ".join(f"'GPU {i}: NVIDIA H200 (UUID: GPU-{i:04d})'" for i in range(n))
    (bin_dir / "nvidia-smi").write_text(f"#!{BASH}\nprintf '%s\\n' {lines}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)


def run(script: str, *args: str | Path, bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(bin_dir), **env}
    return subprocess.run(
        [BASH, str(REPO / "launch" / script), *map(str, args)], env=env, capture_output=True, text=True
    )


def dry_run(script: str, *args: str | Path, bin_dir: Path, **env: str) -> list[str]:
    """The command a DRY_RUN=1 run prints last (`+ cmd` on stderr), split as the shell would."""
    done = run(script, *args, bin_dir=bin_dir, DRY_RUN="1", **env)
    assert done.returncode == 0, done.stderr
    return shlex.split(done.stderr.strip().splitlines()[-1][2:])


def flag(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def recipe_part(cmd: list[str]) -> list[str]:
    return cmd[cmd.index("-m") :]


@pytest.mark.parametrize(
    ("gpus", "visible", "accel_config", "want_config", "want_procs"),
    [
        (0, None, None, "cpu.yaml", None),
        (1, None, None, "single_gpu.yaml", None),
        (4, None, None, "multi_gpu.yaml", "4"),
        (4, "2", None, "single_gpu.yaml", None),
        (4, "", None, "cpu.yaml", None),
        (4, "0,1", "zero3.yaml", "zero3.yaml", "2"),
        (1, None, "zero3_offload.yaml", "zero3_offload.yaml", "1"),
        (4, None, "cpu.yaml", "cpu.yaml", None),  # one process, whatever the GPUs
    ],
)
def test_local_picks_the_config_and_process_count(
    bin_dir, sft_config, gpus, visible, accel_config, want_config, want_procs
) -> None:
    if gpus:
        fake_gpus(bin_dir, gpus)
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    args = [sft_config] + ([ACCEL / accel_config] if accel_config else []) + ["--", *EXTRA]
    cmd = dry_run("sft_local.sh", *args, bin_dir=bin_dir, **env)
    assert cmd[0].endswith("accelerate") and cmd[1] == "launch"
    assert flag(cmd, "--config_file") == f"configs/accelerate/{want_config}"  # relative to the repo root
    assert flag(cmd, "--num_processes") == want_procs
    assert recipe_part(cmd) == ["-m", "r3forge.sft", "--config", str(sft_config), *EXTRA]


def test_local_command_is_valid_for_accelerate(bin_dir, sft_config, monkeypatch) -> None:
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    fake_gpus(bin_dir, 8)
    cmd = dry_run("sft_local.sh", sft_config, *EXTRA, bin_dir=bin_dir)  # flags without `--` pass too
    monkeypatch.chdir(REPO)
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(cmd[2:]))
    assert args.multi_gpu and args.num_processes == 8 and args.mixed_precision == "bf16"
    assert (args.module, args.training_script) == (True, "r3forge.sft")
    assert args.training_script_args == ["--config", str(sft_config), *EXTRA]


SLURM = {"SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_NODEID": "1"}


def test_slurm_node_command_is_valid_for_accelerate(bin_dir, sft_config, monkeypatch) -> None:
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import prepare_deepspeed_cmd_env

    env = {**SLURM, "MAIN_PROCESS_PORT": "29555"}
    cmd = dry_run("sft_multinode_slurm.sh", sft_config, "--", *EXTRA, bin_dir=bin_dir, **env)
    assert cmd[1] == "launch" and flag(cmd, "--config_file") == "configs/accelerate/zero3.yaml"
    sizes = [flag(cmd, f"--{name}") for name in ("num_machines", "num_processes", "machine_rank")]
    assert sizes == ["2", "8", "1"]  # 2 nodes x 4 GPUs (SLURM_GPUS_* unset: the default 4); this is node 1
    assert (flag(cmd, "--main_process_ip"), flag(cmd, "--main_process_port")) == ("gpu07", "29555")
    assert flag(cmd, "--rdzv_backend") == "c10d"
    assert recipe_part(cmd) == ["-m", "r3forge.sft", "--config", str(sft_config), *EXTRA]

    monkeypatch.chdir(REPO)
    args, defaults, _ = _validate_launch_command(launch_command_parser().parse_args(cmd[2:]))
    assert args.use_deepspeed and args.training_script_args == ["--config", str(sft_config), *EXTRA]
    args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)  # as launch_command
    _, ds_env = prepare_deepspeed_cmd_env(args)  # node 1: the torchrun a `standard` launcher runs
    assert (args.nnodes, args.nproc_per_node, args.node_rank) == ("2", "4", 1)
    assert (args.rdzv_backend, args.rdzv_endpoint) == ("c10d", "gpu07:29555")
    assert ds_env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
    assert ds_env["ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"] == "true"
    assert ds_env["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_slurm_srun_payload_runs_with_each_nodes_rank(bin_dir, sft_config, tmp_path) -> None:
    fake = tmp_path / "fake-accelerate"
    fake.write_text(f"#!{BASH}\nprintf '%s\\n' \"$@\"\n")
    fake.chmod(0o755)
    env = {**SLURM, "ACCELERATE": str(fake), "SLURM_CPUS_PER_TASK": "32"}
    done = run("sft_multinode_slurm.sh", sft_config, "--", *EXTRA, bin_dir=bin_dir, DRY_RUN="1", **env)
    srun = shlex.split(done.stderr.splitlines()[0][2:])
    want = ["srun", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--cpus-per-task=32"]
    assert srun[:5] == want and srun[-3:-1] == ["bash", "-c"]
    for rank in ("0", "1"):  # what `bash -c` runs in the srun task of each node
        out = subprocess.run(
            [BASH, "-c", srun[-1]],
            env={"SLURM_NODEID": rank},
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        assert out[0] == "launch" and flag(out, "--machine_rank") == rank
        assert recipe_part(out) == ["-m", "r3forge.sft", "--config", str(sft_config), *EXTRA]


@pytest.mark.parametrize(
    ("env", "want_ip", "want_procs"),
    [
        ({"SLURM_JOB_NODELIST": "a,b"}, "a", "8"),
        ({"SLURM_JOB_NODELIST": "gpu[3,5-7],x"}, "gpu3", "8"),
        ({"SLURM_JOB_NODELIST": "n[1-2]", "MAIN_PROCESS_IP": "10.0.0.9"}, "10.0.0.9", "8"),
        ({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_GPUS_PER_NODE": "h100:8"}, "n1", "16"),
        ({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_GPUS_ON_NODE": "2"}, "n1", "4"),
        ({"SLURM_JOB_NODELIST": "n[1-2]", "GPUS_PER_NODE": "1"}, "n1", "2"),
    ],
)
def test_slurm_main_host_and_gpus(bin_dir, sft_config, env, want_ip, want_procs) -> None:
    cmd = dry_run(
        "sft_multinode_slurm.sh", sft_config, ACCEL / "zero2.yaml", bin_dir=bin_dir, SLURM_NNODES="2", **env
    )
    assert flag(cmd, "--config_file") == "configs/accelerate/zero2.yaml"
    assert (flag(cmd, "--main_process_ip"), flag(cmd, "--num_processes")) == (want_ip, want_procs)
    assert (flag(cmd, "--main_process_port"), flag(cmd, "--machine_rank")) == ("29500", "0")


def test_torchrun_single_and_multi_node(bin_dir, sft_config) -> None:
    from torch.distributed.run import get_args_parser

    fake_gpus(bin_dir, 4)
    cmd = dry_run("sft_torchrun.sh", sft_config, "--", *EXTRA, bin_dir=bin_dir, CUDA_VISIBLE_DEVICES="1,3")
    args = get_args_parser().parse_args(cmd[1:])
    assert (
        cmd[0].endswith("torchrun") and args.standalone and (args.nnodes, args.nproc_per_node) == ("1", "2")
    )
    assert (args.module, args.training_script) == (True, "r3forge.sft")
    assert args.training_script_args == ["--config", str(sft_config), *EXTRA]

    env = {
        "NNODES": "2",
        "NODE_RANK": "1",
        "MASTER_ADDR": "node01",
        "MASTER_PORT": "29555",
        "SLURM_JOB_ID": "77",
    }
    cmd = dry_run("sft_torchrun.sh", sft_config, *EXTRA, bin_dir=bin_dir, **env)
    args = get_args_parser().parse_args(cmd[1:])
    assert not args.standalone and (args.nnodes, args.nproc_per_node, args.node_rank) == ("2", "4", 1)
    assert (args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id) == ("c10d", "node01:29555", "77")
    assert args.training_script_args == ["--config", str(sft_config), *EXTRA]

    (bin_dir / "nvidia-smi").unlink()
    cmd = dry_run("sft_torchrun.sh", sft_config, bin_dir=bin_dir)  # no GPU: one process
    assert flag(cmd, "--nproc_per_node") == "1"


@pytest.mark.parametrize("script", SCRIPTS)
def test_missing_config_is_exit_2_naming_the_path(bin_dir, tmp_path, script) -> None:
    missing = tmp_path / "nope" / "missing.yaml"
    done = run(script, missing, bin_dir=bin_dir, DRY_RUN="1", **SLURM)
    assert done.returncode == 2 and str(missing) in done.stderr and "+ " not in done.stderr
    done = run(script, bin_dir=bin_dir, DRY_RUN="1")
    assert done.returncode == 2 and "usage" in done.stderr


def test_missing_accelerate_config_and_master_addr_are_exit_2(bin_dir, sft_config, tmp_path) -> None:
    missing = tmp_path / "zero9.yaml"
    for script in ("sft_local.sh", "sft_multinode_slurm.sh"):
        done = run(script, sft_config, missing, bin_dir=bin_dir, DRY_RUN="1", **SLURM)
        assert done.returncode == 2 and str(missing) in done.stderr
    done = run("sft_torchrun.sh", sft_config, bin_dir=bin_dir, DRY_RUN="1", NNODES="2")
    assert done.returncode == 2 and "MASTER_ADDR" in done.stderr
