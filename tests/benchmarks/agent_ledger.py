"""Keep a finished (arm, seed) run of tests/benchmarks/bench_agent_grpo_seeds.sh in the repository.

    .venv/bin/python tests/benchmarks/agent_ledger.py RUN_DIR ARM SEED LEDGER QUESTIONS

The machines this bench runs on are lent one session at a time, and a run folder under runs/ does not outlive
its machine: the nine (arm, seed) runs take about ten hours, several sessions. So the bench copies each
finished run's result files into LEDGER (committed; tests/benchmarks/results/agent_seeds by default), and
`agent_learning_tables.py LEDGER` reads them as it reads a run folder. LEDGER/<arm>_s<seed>/ gets:

    eval_0/       the evaluation of the warm start this run started from (summary.json, rows.jsonl.gz)
    eval_<step>/  every checkpoint's evaluation (the same two files; rows carry the completions)
    grpo/         metrics.jsonl (one line per logged step), final_metrics.json and the recipe's own run.json
                  (the commit, torch / transformers / trl versions, the precision, start and end)
    run.json      what that one lacks: the CPU's vector / bf16 flags and the thread count, whether the tree had
                  uncommitted changes outside the ledger when the run was recorded, the sha256 of the questions
                  and of the warm-start data (the student arm: the student's folder and weights' sha256), so runs
                  from different machines can be told apart

A warm start is rebuilt on each machine that needs one (its SFT is pinned to fp32 by the bench); its own
evaluation goes with every run that started from it, so a gain is always measured from the run's own start.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from r3forge.data.jsonio import write_json
from r3forge.models.embedded import sha256_file
from r3forge.precision import cpu_flags, cpu_model

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "bf16", "asimd", "sve")


def sha256(path: Path) -> str | None:
    return sha256_file(path) if path.is_file() else None


def copy_eval(src: Path, dst: Path) -> None:
    for name in ("summary.json", "rows.jsonl"):
        if not (src / name).is_file():
            raise SystemExit(f"agent_ledger: {src / name} is missing: that evaluation has not finished")
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "summary.json", dst / "summary.json")
    # mtime 0: the same rows give the same bytes, so a rerun of the ledger step changes nothing in git
    with open(dst / "rows.jsonl.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
        out.write((src / "rows.jsonl").read_bytes())


def uncommitted_changes(ledger: Path) -> bool | None:
    """Whether the tree (the current folder: the repository's root, where the benches run) has changes outside
    `ledger`, the record being written, which is not a change to the code; None where git cannot tell."""
    spec = ["."]
    if ledger.resolve().is_relative_to(Path.cwd().resolve()):  # git refuses a pathspec outside the tree
        spec.append(f":(exclude){ledger.resolve()}")
    git = subprocess.run(
        ["git", "status", "--porcelain", "--", *spec], capture_output=True, text=True, check=False
    )
    return bool(git.stdout.strip()) if git.returncode == 0 else None


def machine(questions: Path, warmstart_data: Path, ledger: Path) -> dict:
    return {
        "cpu": cpu_model(),
        "cpu_flags": sorted(cpu_flags() & set(FLAGS)),
        "torch_threads": torch.get_num_threads(),
        "uncommitted_changes": uncommitted_changes(ledger),
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "questions_sha256": sha256(questions),
        "warmstart_data_sha256": sha256(warmstart_data),
    }


def record(run_dir: Path, arm: str, seed: int, ledger: Path, questions: Path) -> Path:
    """Copy run `<arm>_s<seed>` of `run_dir` (and its warm start's evaluation) to `ledger`; returns its folder."""
    src, dst = run_dir / f"{arm}_s{seed}", ledger / f"{arm}_s{seed}"
    final = json.loads((src / "grpo" / "final_metrics.json").read_text())
    steps = sorted(int(e.name.removeprefix("eval_")) for e in src.glob("eval_*") if e.is_dir())
    if not steps or steps[-1] != final["logged_steps"]:
        raise SystemExit(
            f"agent_ledger: {src}: evaluations {steps} do not reach the last step {final['logged_steps']}"
        )
    tmp = ledger / f".{arm}_s{seed}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    copy_eval(run_dir / f"{arm}_eval_0", tmp / "eval_0")
    for s in steps:
        copy_eval(src / f"eval_{s}", tmp / f"eval_{s}")
    (tmp / "grpo").mkdir()
    for name in ("metrics.jsonl", "final_metrics.json", "run.json"):
        shutil.copyfile(src / "grpo" / name, tmp / "grpo" / name)
    about = {"arm": arm, "seed": seed, "steps": steps} | machine(
        questions, run_dir / f"ws_{arm}.jsonl", ledger
    )
    if arm == "student":  # which student: a release folder is rebuilt per machine, so its weights' hash
        student = Path(os.environ.get("STUDENT", ""))
        about |= {"student": str(student), "student_weights_sha256": sha256(student / "model.safetensors")}
    write_json(tmp / "run.json", about)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)  # whole or not at all
    return dst


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit("usage: agent_ledger.py RUN_DIR ARM SEED LEDGER QUESTIONS")
    print(
        f"recorded: {record(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]))}"
    )
