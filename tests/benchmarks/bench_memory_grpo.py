"""Peak memory of the GRPO CPU recipe (configs/grpo/agent_world_cpu.yaml) and where it goes.

    .venv/bin/python tests/benchmarks/bench_memory_grpo.py --run runs/quickstart-<time> [--steps 3] \\
        [--variants yaml,checkpointing,no_ref,heap,low]

Uses a finished quickstart run's world, BM25 index, warm-started policy and reranker student (the reranker
behind one vLLM server that this script starts, as the quickstart does, so that no variant measures it).
Each variant is `r3forge grpo --config configs/grpo/agent_world_cpu.yaml` for `--steps` steps (a checkpoint
at the middle step, as in the quickstart) with a few flags changed, in its own process, one after another:

* `yaml`: the YAML as it ships (the baseline);
* `checkpointing`: `--gradient_checkpointing true`: the backbone's activations are recomputed in the
  backward pass instead of kept (what full activations over 8 multi-turn sequences cost);
* `no_ref`: `--beta 0`: TRL loads no reference model (what the frozen reference costs);
* `heap`: `--bound_cpu_heap true`: glibc returns freed blocks of 1 MiB and more (what heap growth costs);
* `low`: checkpointing and a bounded heap together.

Reported per variant: the GRPO process's peak RSS (the kernel's high-water mark, read every 0.5 s), the peak
summed over its process tree (sampled every 0.5 s), wall seconds for the whole command (load, rollouts,
training, saving) and each as a ratio against `yaml`. It times: run it alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from r3forge.backends.vllm_server import ServeLLMConfig, VLLMServer
from r3forge.procmem import TreePeak, gib

VARIANTS = {
    "yaml": [],
    "checkpointing": ["--gradient_checkpointing", "true"],
    "no_ref": ["--beta", "0"],
    "heap": ["--bound_cpu_heap", "true"],
    "low": ["--gradient_checkpointing", "true", "--bound_cpu_heap", "true"],
}


def run_variant(argv: list[str], log: Path) -> dict[str, float | None]:
    start = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "r3forge", *argv], stdout=out, stderr=subprocess.STDOUT
        )
        with TreePeak(proc.pid) as tree:
            code = proc.wait()
    if code != 0:
        raise SystemExit(f"{' '.join(argv[:3])} ... exited {code}; log: {log}")
    return {"peak_rss_gib": gib(tree.process_bytes), "peak_tree_rss_gib": gib(tree.bytes),
            "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a finished quickstart run folder")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument(
        "--workdir", default=None, help="where the variants' run folders go (default: a temp dir)"
    )
    args = ap.parse_args()
    run = Path(args.run)
    needed = [
        run / "warmstart-sft" / "final",
        run / "reranker",
        run / "index",
        run / "world" / "questions.jsonl",
    ]
    if missing := [str(p) for p in needed if not p.exists()]:
        raise SystemExit(f"--run {run}: not a finished quickstart run (missing {', '.join(missing)})")
    names = args.variants.split(",")
    if unknown := [n for n in names if n not in VARIANTS]:
        raise SystemExit(f"--variants: unknown {unknown}; known: {list(VARIANTS)}")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-memory-grpo-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = {}
    server_cfg = ServeLLMConfig(model=str(run / "reranker"), port=0, cpu_kvcache_gib=2,
                                log_file=str(work / "vllm-reranker.log"))  # fmt: skip
    with VLLMServer(server_cfg) as server:
        base = ["grpo", "--config", "configs/grpo/agent_world_cpu.yaml",
                "--dataset", str(run / "world" / "questions.jsonl"), "--index", str(run / "index"),
                "--reranker_model", str(run / "reranker"), "--reranker_serve", "false",
                "--reranker_base_url", server.base_url, "--reranker_tokenizer", str(run / "reranker"),
                "--model_name_or_path", str(run / "warmstart-sft" / "final"), "--max_steps", str(args.steps),
                "--save_steps", str(max(1, args.steps // 2)), "--save_rollouts", "false"]  # fmt: skip
        for name in names:
            out = work / name
            rows[name] = run_variant([*base, *VARIANTS[name], "--output_dir", str(out), "--overwrite", "true"],
                                     work / f"{name}.log")  # fmt: skip
            print(name, rows[name], file=sys.stderr, flush=True)
    ref = rows.get("yaml") or next(iter(rows.values()))
    print(f"\nGRPO CPU recipe, {args.steps} steps, {os.cpu_count()} cores; ratios against `yaml`\n")
    print("| variant | flags | peak RSS GiB | vs yaml | peak tree RSS GiB | vs yaml | seconds | vs yaml |")
    print("|:---|:---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        ratio = {k: (r[k] / ref[k] if r[k] and ref[k] else float("nan")) for k in r}
        print(f"| {name} | {' '.join(VARIANTS[name]) or '(as shipped)'} | {r['peak_rss_gib']:.2f} | "
              f"{ratio['peak_rss_gib']:.2f}x | {r['peak_tree_rss_gib']:.2f} | {ratio['peak_tree_rss_gib']:.2f}x | "
              f"{r['seconds']:.0f} | {ratio['seconds']:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
