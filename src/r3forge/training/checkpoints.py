"""Which checkpoint a run resumes from, and the run's metrics rolled back to it.

The Trainer writes `checkpoint-N/` in place, file by file (weights, optimizer, scheduler, RNG states, then
`trainer_state.json` last), so a run killed while saving leaves a folder that transformers'
`get_last_checkpoint` picks and the Trainer then cannot load ("Can't find a valid checkpoint"), on every
rerun. Here a checkpoint is *complete* when it holds what the Trainer reads to resume: a readable
`trainer_state.json`, the model weights (full, sharded, LoRA adapter, FSDP or DeepSpeed) and, unless the run
saves the model only (`save_only_model`), the optimizer and scheduler state; every file has its full length
(a safetensors file as long as its header says, a torch zip archive with its central directory).

`resume_from_checkpoint: auto` takes the newest complete checkpoint. A newer incomplete one is renamed
`incomplete-checkpoint-N` (`.2`, `.3`, ... when taken), never deleted, and a line on stderr says so; the name
is outside the `checkpoint-*` pattern the Trainer's `save_total_limit` rotation deletes from.

`metrics.jsonl` is rolled back to the checkpoint: the rows logged after it was saved (the resumed run logs
those steps again) move to `metrics.superseded.jsonl`, so `metrics.jsonl` describes the run that produced
the model, one row per event, and the rows of the lost steps are kept beside it.
"""

from __future__ import annotations

import json
import re
import struct
import sys
import zipfile
from pathlib import Path
from typing import Any

from r3forge.data.jsonio import write_jsonl

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")  # transformers' own pattern (trainer_utils)
STATE = "trainer_state.json"
WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
)
OPTIMIZERS = ("optimizer.pt", "optimizer.bin")
SCHEDULER = "scheduler.pt"
SUPERSEDED = "metrics.superseded.jsonl"


def _file_problem(path: Path) -> str | None:
    """Why `path` is not a whole file (missing, empty, shorter than its own header says), or None."""
    try:
        size = path.stat().st_size
        if size == 0:
            return f"{path.name} is empty"
        with path.open("rb") as f:
            head = f.read(8)
            if path.suffix == ".safetensors":
                (length,) = struct.unpack("<Q", head)
                if 8 + length > size:
                    return f"{path.name} is cut short"
                header = json.loads(f.read(length))
                end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
                return None if size >= 8 + length + end else f"{path.name} is cut short"
    except FileNotFoundError:
        return f"no {path.name}"
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return f"{path.name} is unreadable"
    if head.startswith(b"PK") and not zipfile.is_zipfile(path):  # torch.save's zip archive, cut short
        return f"{path.name} is cut short"
    return None


def _deepspeed(folder: Path) -> bool:
    """A DeepSpeed checkpoint: its engine state (weights, optimizer, scheduler) in global_step*/."""
    return (folder / "latest").is_file() and any(folder.glob("global_step*/*"))


def _weights_problem(folder: Path) -> str | None:
    if _deepspeed(folder) or any(folder.glob("pytorch_model_fsdp*")):
        return None
    present = [folder / name for name in WEIGHTS if (folder / name).exists()]
    present += list(folder.glob("*/adapter_model.*"))  # several adapters: one subfolder each
    if not present:
        return "no model weights (model.safetensors, adapter_model.safetensors, pytorch_model.bin, ...)"
    for path in present:
        if problem := _file_problem(path):
            return problem
        if path.name.endswith(".index.json"):
            try:
                shards = set(json.loads(path.read_text())["weight_map"].values())
            except (OSError, ValueError, KeyError, AttributeError):
                return f"{path.name} is unreadable"
            for shard in sorted(shards):
                if problem := _file_problem(folder / shard):
                    return problem
    return None


def read_state(folder: Path) -> dict[str, Any] | None:
    """The checkpoint's trainer_state.json, or None when it is missing or not a whole JSON object."""
    try:
        state = json.loads((folder / STATE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("global_step"), int) else None


def checkpoint_problem(folder: Path, model_only: bool = False) -> str | None:
    """What keeps the Trainer from resuming from `folder` (None: it is complete), checked in the order the
    Trainer writes, so the first problem is where a kill stopped the save. `model_only`: the run saves no
    optimizer or scheduler state (save_only_model), so they are not required."""
    if not folder.is_dir():
        return "not a folder"
    if problem := _weights_problem(folder) or _optimizer_problem(folder, model_only):
        return problem
    return None if read_state(folder) else f"{STATE} is missing or cut short"


def _optimizer_problem(folder: Path, model_only: bool) -> str | None:
    if model_only or _deepspeed(folder):
        return None
    if not (folder / "optimizer_0").is_dir():  # FSDP's sharded optimizer state is a folder
        present = [folder / name for name in OPTIMIZERS if (folder / name).exists()]
        if not present:
            return "no optimizer state (optimizer.pt)"
        if problem := _file_problem(present[0]):
            return problem
    return _file_problem(folder / SCHEDULER)


def _aside(folder: Path) -> Path:
    target = folder.with_name(f"incomplete-{folder.name}")
    n = 1
    while target.exists():
        n += 1
        target = folder.with_name(f"incomplete-{folder.name}.{n}")
    return target


def latest_complete_checkpoint(
    output_dir: Path, model_only: bool = False, move_aside: bool = True
) -> Path | None:
    """The newest complete `checkpoint-N` of `output_dir` (None: there is none). Incomplete ones newer than
    it are renamed `incomplete-checkpoint-N[.K]` when `move_aside` (the main process; the others only look),
    each with a line on stderr."""
    if not output_dir.is_dir():
        return None
    found = [(int(m[1]), p) for p in output_dir.iterdir() if (m := CHECKPOINT.match(p.name)) and p.is_dir()]
    for _, folder in sorted(found, reverse=True):
        problem = checkpoint_problem(folder, model_only)
        if problem is None:
            return folder
        if move_aside:
            target = _aside(folder)
            folder.rename(target)
            print(
                f"resume: {folder} is incomplete ({problem}): moved aside to {target.name}", file=sys.stderr
            )
    return None


def _step(line: str) -> int | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    step = row.get("step") if isinstance(row, dict) else None
    return step if isinstance(step, int) else None


def roll_back_metrics(path: Path, state: dict[str, Any] | None) -> int:
    """Keep in `path` (metrics.jsonl) the rows logged before the checkpoint whose trainer_state.json is
    `state` was saved (None: a fresh start keeps none); move the others, and any line cut short by a kill,
    to metrics.superseded.jsonl beside it. Returns how many rows moved.

    The rows at the checkpoint's own step are told apart by the checkpoint's log history: it holds the
    events logged up to the save, so rows beyond that count (e.g. the end-of-training summary of a run
    killed while saving `final/`) were logged after it and are logged again by the resumed run.
    """
    if not path.is_file():
        return 0
    step = state["global_step"] if state else -1
    history = state.get("log_history", []) if state else []
    at_step = sum(1 for row in history if isinstance(row, dict) and row.get("step") == step)
    kept: list[Any] = []
    moved: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row_step = _step(line)
        if row_step is not None and (row_step < step or (row_step == step and at_step > 0)):
            at_step -= row_step == step
            kept.append(json.loads(line))
        elif line.strip():
            moved.append(line)
    if moved:
        with (path.parent / SUPERSEDED).open("a", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in moved)
        write_jsonl(path, kept)
        when = (
            f"after the checkpoint of step {step}" if state else "by a run that left no complete checkpoint"
        )
        print(
            f"resume: {len(moved)} row(s) of {path.name} logged {when} moved to {SUPERSEDED}", file=sys.stderr
        )
    return len(moved)
