"""Resuming a run killed while it saved a checkpoint: the complete/incomplete choice on checkpoint folders
written with the real file formats, the rollback of metrics.jsonl, and real SFT runs on the embedded model
resumed after a half-written save (reproduced by cutting the last checkpoint short in-process; under `slow`,
a real `r3forge sft` process killed with SIGKILL while it writes one)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import datasets
import pytest
import torch
from safetensors.torch import save_file
from transformers.trainer_utils import get_last_checkpoint, rotate_checkpoints

from r3forge.config import parse_config
from r3forge.errors import ConfigError
from r3forge.recipes.sft import main
from r3forge.sft.config import SFT_CONFIGS
from r3forge.training.checkpoints import checkpoint_problem, latest_complete_checkpoint, roll_back_metrics
from r3forge.training.run import prepare_output_dir

ROWS = [
    {"prompt": [{"role": "user", "content": f"Is document {i} about question {i}?"}],
     "completion": [{"role": "assistant", "content": f"Comment: It names item {i}.\nScore: {1 + i % 5}"}]}
    for i in range(8)
]  # fmt: skip


def write_checkpoint(
    folder: Path, step: int, weights: str = "model.safetensors", optimizer: bool = True
) -> Path:
    """A checkpoint folder as the Trainer writes it: weights, optimizer, scheduler, trainer_state.json."""
    folder.mkdir(parents=True)
    save_file({"w": torch.ones(64, 64)}, folder / weights)
    if optimizer:
        torch.save({"state": {0: {"exp_avg": torch.zeros(64, 64)}}}, folder / "optimizer.pt")
        torch.save({"last_epoch": step}, folder / "scheduler.pt")
    history = [{"loss": 1.0 / s, "step": s} for s in range(1, step + 1)]
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": history}))
    return folder


def cut(path: Path, keep: float = 0.5) -> None:
    """Truncate `path` as a kill in the middle of writing it leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_complete_and_incomplete_checkpoints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert checkpoint_problem(write_checkpoint(out / "checkpoint-2", 2)) is None
    killed = {  # what each half-written save lacks
        3: ("model.safetensors", "model.safetensors is cut short"),
        4: ("optimizer.pt", "optimizer.pt is cut short"),  # a torch zip archive without its directory
        5: ("trainer_state.json", "trainer_state.json is missing or cut short"),
        6: ("scheduler.pt", "no scheduler.pt"),
    }
    for step, (name, problem) in killed.items():
        folder = write_checkpoint(out / f"checkpoint-{step}", step)
        if name == "scheduler.pt":
            (folder / name).unlink()
        else:
            cut(folder / name)
        assert checkpoint_problem(folder) == problem
    (out / "checkpoint-7").mkdir()  # the kill came as the folder was made
    assert get_last_checkpoint(str(out)).endswith("checkpoint-7")  # what `auto` used to resume from

    # the other processes of a launch only look; the main one moves every newer incomplete folder aside
    assert latest_complete_checkpoint(out, move_aside=False) == out / "checkpoint-2"
    assert (out / "checkpoint-7").is_dir()
    assert latest_complete_checkpoint(out) == out / "checkpoint-2"
    err = capsys.readouterr().err
    for step in (3, 4, 5, 6, 7):
        assert not (out / f"checkpoint-{step}").exists() and (out / f"incomplete-checkpoint-{step}").is_dir()
        assert (
            f"checkpoint-{step} is incomplete" in err
            and f"moved aside to incomplete-checkpoint-{step}" in err
        )
    assert "(model.safetensors is cut short)" in err and "(no model weights" in err
    assert (out / "incomplete-checkpoint-3" / "optimizer.pt").is_file()  # nothing of the run is deleted
    assert latest_complete_checkpoint(out) == out / "checkpoint-2" and capsys.readouterr().err == ""

    # killed again at the same step: a second folder aside; the Trainer's rotation never deletes them
    cut(write_checkpoint(out / "checkpoint-3", 3) / "model.safetensors", 0.99)
    assert latest_complete_checkpoint(out) == out / "checkpoint-2"
    assert (out / "incomplete-checkpoint-3.2" / "model.safetensors").is_file()
    write_checkpoint(out / "checkpoint-8", 8)
    rotate_checkpoints(str(out), save_total_limit=1)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith("incomplete-")) == ["checkpoint-8"]
    assert len(list(out.glob("incomplete-*"))) == 6

    # no complete checkpoint: a fresh start
    (tmp_path / "none" / "checkpoint-1").mkdir(parents=True)
    assert latest_complete_checkpoint(tmp_path / "none") is None
    assert latest_complete_checkpoint(tmp_path / "missing") is None


def test_checkpoint_layouts(tmp_path: Path) -> None:
    lora = write_checkpoint(tmp_path / "lora", 1, weights="adapter_model.safetensors")
    assert checkpoint_problem(lora) is None
    model_only = write_checkpoint(tmp_path / "model-only", 1, optimizer=False)  # save_only_model
    assert checkpoint_problem(model_only) == "no optimizer state (optimizer.pt)"
    assert checkpoint_problem(model_only, model_only=True) is None
    sharded = write_checkpoint(tmp_path / "sharded", 1, weights="model-00001-of-00002.safetensors")
    index = {"weight_map": {"w": "model-00001-of-00002.safetensors", "v": "model-00002-of-00002.safetensors"}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    assert checkpoint_problem(sharded) == "no model-00002-of-00002.safetensors"
    save_file({"v": torch.ones(2)}, sharded / "model-00002-of-00002.safetensors")
    assert checkpoint_problem(sharded) is None
    deepspeed = write_checkpoint(tmp_path / "ds", 1, optimizer=False)  # ZeRO: optimizer in global_step*/
    (deepspeed / "global_step1").mkdir()
    (deepspeed / "global_step1" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"x")
    (deepspeed / "latest").write_text("global_step1")
    assert checkpoint_problem(deepspeed) is None
    assert checkpoint_problem(tmp_path / "absent") == "not a folder"
    header_cut = write_checkpoint(tmp_path / "header-cut", 1)
    cut(header_cut / "model.safetensors", 0.001)  # inside the header: its length is past the end
    assert checkpoint_problem(header_cut) == "model.safetensors is cut short"
    (header_cut / "model.safetensors").write_bytes(b"")
    assert checkpoint_problem(header_cut) == "model.safetensors is empty"
    with pytest.raises(ConfigError, match=r"not a complete checkpoint \(no optimizer state"):
        prepare_output_dir(str(tmp_path / "out"), str(model_only), overwrite=False)
    assert prepare_output_dir(str(tmp_path / "out"), str(model_only), False, model_only=True) == str(
        model_only
    )


def test_metrics_roll_back_to_the_checkpoint(tmp_path: Path) -> None:
    """Rows logged after the checkpoint move to metrics.superseded.jsonl: later steps, the rows at its own
    step beyond those its log history holds, a line cut short by the kill; a fresh start keeps none."""
    path = tmp_path / "metrics.jsonl"
    logged = [{"step": 0, "task": 0.1}, {"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5},
              {"step": 2, "eval_loss": 1.4}, {"step": 2, "train_runtime": 9.0}, {"step": 3, "loss": 1.2}]  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in logged) + '{"step": 4, "lo')
    state = {"global_step": 2, "log_history": [{"loss": 2.0, "step": 1}, {"loss": 1.5, "step": 2},
                                               {"eval_loss": 1.4, "step": 2}]}  # fmt: skip
    assert roll_back_metrics(path, state) == 3
    assert rows(path) == logged[:4]
    superseded = (tmp_path / "metrics.superseded.jsonl").read_text().splitlines()
    assert superseded == [json.dumps(logged[4]), json.dumps(logged[5]), '{"step": 4, "lo']
    assert roll_back_metrics(path, state) == 0  # rolled back already: nothing moves
    assert roll_back_metrics(path, None) == 4 and path.read_text() == ""
    assert len((tmp_path / "metrics.superseded.jsonl").read_text().splitlines()) == 7
    assert roll_back_metrics(tmp_path / "absent.jsonl", state) == 0


# --------------------------------------------------------------------------------------- real SFT runs
@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sftdata") / "dsd"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS)}).save_to_disk(str(path))
    return path


def argv(data: Path, out: Path, model: Path, *extra: str) -> list[str]:
    args = ["--dataset", str(data), "--task", "generic", "--output_dir", str(out), "--eval_split", ""]
    args += [
        "--model_name_or_path",
        str(model),
        "--bf16",
        "false",
        "--use_cpu",
        "true",
        "--report_to",
        "none",
    ]
    args += ["--max_steps", "3", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1"]
    args += ["--learning_rate", "1e-3", "--max_length", "64", "--save_steps", "1", "--logging_steps", "1"]
    return [*args, "--gradient_checkpointing", "false", *extra]


def assert_resumed(out: Path, steps: int) -> None:
    """The run finished, every checkpoint is complete, and metrics.jsonl holds each event once."""
    logged = rows(out / "metrics.jsonl")
    assert [row["step"] for row in logged if "loss" in row] == list(range(1, steps + 1))
    assert not [k for k, n in Counter((r["step"], tuple(sorted(r))) for r in logged).items() if n > 1]
    assert sum("train_runtime" in row for row in logged) == 1
    for step in range(1, steps + 1):
        assert checkpoint_problem(out / f"checkpoint-{step}") is None
    assert (out / "final").is_dir() and json.loads((out / "run.json").read_text())["finished"]


LORA = (
    "--use_peft",
    "true",
    "--lora_r",
    "4",
    "--lora_alpha",
    "8",
    "--lora_target_modules",
    "q_proj",
    "v_proj",
)


def test_sft_resumes_after_a_save_cut_short(
    data: Path, smollm2_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A LoRA run of 2 steps; then its folder as a kill while writing checkpoint-2's adapter leaves it
    (adapter cut short, the files written after it absent, no final/; metrics.jsonl up to the step-2 loss
    row). `auto` resumes from checkpoint-1 and finishes; the cut folder is kept aside."""
    out = tmp_path / "run"
    two_steps = [*LORA, "--max_steps", "2"]
    main(*parse_config(SFT_CONFIGS, argv(data, out, smollm2_path, *two_steps)))
    last = out / "checkpoint-2"
    cut(last / "adapter_model.safetensors")
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"):
        (last / name).unlink()
    shutil.rmtree(out / "final")
    (out / "final_metrics.json").unlink()
    logged = rows(out / "metrics.jsonl")
    (out / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in logged if "train_runtime" not in r)
    )
    assert get_last_checkpoint(str(out)) == str(last)  # what `auto` used to pick, then fail on

    main(
        *parse_config(
            SFT_CONFIGS, argv(data, out, smollm2_path, *two_steps, "--resume_from_checkpoint", "auto")
        )
    )
    err = capsys.readouterr().err
    assert f"resume: {last} is incomplete (adapter_model.safetensors is cut short)" in err
    assert "resume: 1 row(s) of metrics.jsonl logged after the checkpoint of step 1 moved" in err
    assert_resumed(out, 2)
    aside = out / "incomplete-checkpoint-2" / "adapter_model.safetensors"
    assert aside.stat().st_size < (out / "checkpoint-2" / "adapter_model.safetensors").stat().st_size
    assert [row["step"] for row in rows(out / "metrics.superseded.jsonl")] == [2]


@pytest.mark.slow  # ~3-5 min on 2 cores: full fine-tuning writes ~1.6 GB per checkpoint
def test_sft_killed_while_saving_resumes(data: Path, smollm2_path: Path, tmp_path: Path) -> None:
    """`r3forge sft` killed with SIGKILL as soon as checkpoint-2/ appears (full fine-tuning: the weights and
    the optimizer state take seconds to write), then rerun with `auto` until it finishes."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "r3forge", "sft", *argv(data, out, smollm2_path)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    log = tmp_path / "first.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            deadline = time.monotonic() + 600
            while not (out / "checkpoint-2").exists():
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline
                time.sleep(0.005)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
    assert checkpoint_problem(out / "checkpoint-2") is not None  # killed mid-save
    rerun = subprocess.run([*cmd, "--resume_from_checkpoint", "auto"], env=env, capture_output=True, text=True,
                           timeout=900, check=False)  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resume: {out / 'checkpoint-2'} is incomplete" in rerun.stderr
    assert (out / "incomplete-checkpoint-2").is_dir()
    assert_resumed(out, 3)
