"""CPU SFT step: TRL's fused LM head as shipped (every position scored) vs `compact_cpu_lm_head` (only the
completion tokens, as TRL does on CUDA).

    .venv/bin/python tests/benchmarks/bench_sft_lm_head.py [--steps 8] [--config configs/sft/verbal_reranker_world_cpu.yaml] \\
        [--beside nothing] [--out FILE]

Builds the quickstart's reranker SFT set (a synthetic world, seed 1, 30 questions; the rule teacher's labels,
`annotate rules`) in a temporary folder, then runs `r3forge sft --config <config>` for `--steps` steps twice,
each in its own process: `--compact_cpu_lm_head false` (the baseline, TRL 1.16 on CPU) and `true` (the
recipe's default). Reported: seconds per step (the Trainer's train_runtime / steps, the
first step's warm-up included in both), the ratio against the baseline, and the training loss of the last
step in each (equal up to bf16 noise: the same sums over the same tokens). Run it alone: it times. The result
file (`--out`, default `tests/benchmarks/results/sft_lm_head/<cpu>_<bf16 units>.json`, one per CPU kind) holds
the figures (`runs`: seconds per step, the ratio against the baseline and the last loss of each), the table
`lm_head` it prints, and the provenance (result_file.py); `--beside` says what shared the cores.

Measured on 2 CPU cores, alone (2026-12-02, `--steps 8`, verbal_reranker_world_cpu.yaml: batch 8, bf16
autocast, ~220 prompt + ~30 completion tokens per row):

| LM head on CPU | s/step | vs TRL as shipped | last training loss |
|:---|---:|---:|---:|
| TRL as shipped (every position) | 14.65 | 1.00x | 0.3698 |
| compact_cpu_lm_head | 5.68 | 0.39x | 0.3671 |

The head's 49k-vocabulary projection over every one of the ~250 positions per row is what the compaction
removes: it now covers the ~30 completion tokens.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from render_tables import markdown_table
from result_file import NOT_RECORDED, cpu_kind, write_result

R3FORGE = [sys.executable, "-m", "r3forge"]
RESULTS = Path(__file__).parent / "results" / "sft_lm_head"
BASELINE = "TRL as shipped (every position)"


def build_data(folder: Path) -> Path:
    world, data = folder / "world", folder / "sft-data"
    subprocess.run([*R3FORGE, "data", "synth-world", "--seed", "1", "--num_passages", "500", "--num_questions",
                    "30", "--output_dir", str(world)], check=True, capture_output=True)  # fmt: skip
    subprocess.run([*R3FORGE, "annotate", "rules", "--qa_path", str(world / "hf" / "questions"),
                    "--validation_fraction", "0.25", "--max_per_score", "40", "--output_dir", str(data)],
                   check=True, capture_output=True)  # fmt: skip
    return data


def run(config: str, data: Path, out: Path, steps: int, compact: bool) -> dict:
    argv = [*R3FORGE, "sft", "--config", config, "--dataset", str(data), "--eval_split", "",
            "--task_eval_samples", "0", "--max_steps", str(steps), "--logging_steps", "1", "--save_strategy",
            "no", "--report_to", "none", "--compact_cpu_lm_head", str(compact).lower(), "--output_dir", str(out)]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True)
    metrics = json.loads((out / "final_metrics.json").read_text())
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in logs if "loss" in r]
    return {"s_per_step": metrics["train_runtime"] / steps, "last_loss": losses[-1]}


def table(figures: dict) -> dict:
    """The table `lm_head`: per run, seconds per step, its ratio against TRL as shipped and the last loss.

    >>> runs = {BASELINE: {"s_per_step": 14.65, "ratio_s_per_step_vs_baseline": 1.0, "last_loss": 0.3698},
    ...         "compact_cpu_lm_head": {"s_per_step": 5.68, "ratio_s_per_step_vs_baseline": 0.3877,
    ...                                 "last_loss": 0.36712}}
    >>> table({"runs": runs})["rows"]
    [['TRL as shipped (every position)', '14.65', '1.00x', '0.3698'], ['compact_cpu_lm_head', '5.68', '0.39x', '0.3671']]
    """
    rows = [[name, f"{r['s_per_step']:.2f}", f"{r['ratio_s_per_step_vs_baseline']:.2f}x", f"{r['last_loss']:.4f}"]
            for name, r in figures["runs"].items()]  # fmt: skip
    return {"columns": ["LM head on CPU", "s/step", "vs TRL as shipped", "last training loss"], "align": "lrrr",
            "rows": rows}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--config", default="configs/sft/verbal_reranker_world_cpu.yaml")
    ap.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    ap.add_argument("--out", default=None, help="result file (default: results/sft_lm_head/<cpu kind>.json)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = build_data(Path(tmp))
        results = {}
        for name, compact in ((BASELINE, False), ("compact_cpu_lm_head", True)):
            results[name] = run(args.config, data, Path(tmp) / f"run-{compact}", args.steps, compact)
            print(name, results[name], file=sys.stderr)
    base = next(iter(results.values()))
    for r in results.values():
        r["ratio_s_per_step_vs_baseline"] = r["s_per_step"] / base["s_per_step"]
    figures = {"config": args.config, "steps": args.steps, "baseline": BASELINE, "runs": results}
    print("\n".join(markdown_table(table(figures))))
    out = Path(args.out) if args.out else RESULTS / f"{cpu_kind()}.json"
    write_result(out, figures, {"lm_head": table(figures)}, beside=args.beside)
    print(f"result: {out}")


if __name__ == "__main__":
    main()
