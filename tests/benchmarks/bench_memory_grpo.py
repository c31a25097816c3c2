"""Peak memory of the GRPO CPU recipe (configs/grpo/agent_world_cpu.yaml) and where it goes.

    .venv/bin/python tests/benchmarks/bench_memory_grpo.py --run runs/quickstart-<time> [--steps 3] \\
        [--variants yaml,before,...] [--beside nothing] [--out FILE]

Uses a finished quickstart run's world, BM25 index, warm-started policy and reranker student (the reranker
behind one vLLM server that this script starts, as the quickstart does, so that no variant measures it).
Each variant is `r3forge grpo --config configs/grpo/agent_world_cpu.yaml` for `--steps` steps (a checkpoint
at the middle step, as in the quickstart) with a few flags changed, in its own process, one after another:

* `yaml`: the YAML as it ships (the baseline): gradient checkpointing, TRL's fused LM head scoring only the
  completion tokens (`compact_cpu_lm_head`) in [512, 4096] tiles (`cpu_lm_head_tile_*`), a bounded heap;
* `before`: the recipe before the memory budget: no checkpointing, every position scored, TRL's
  [4096, 32768] tiles, glibc's heap unbounded;
* `no_checkpointing`: `--gradient_checkpointing false`: the backbone's activations kept for the backward pass
  (what full activations over 8 multi-turn sequences cost);
* `trl_tiles`: TRL's own [4096, 32768] tiles (what the LM head's temporaries cost);
* `no_compact`: the head scores every prompt and padding position too;
* `no_ref`: `--beta 0`: TRL loads no reference model (what the frozen reference costs);
* `no_heap`: `--bound_cpu_heap false`: glibc keeps freed blocks (what heap growth costs);
* `half_batch`: 4 sequences per forward/backward, 2 accumulation steps: the same 8 rollouts per step;
* `padded`: `--packed_step false`: TRL's own training step, every micro-batch padded to the generation batch's
  longest rollout and every completion position scored (the packed, mask-aware step is the YAML's default).

Reported per variant: the GRPO process's peak RSS (the kernel's high-water mark, read every 0.5 s), the peak
summed over its process tree (sampled every 0.5 s), wall seconds for the whole command (load, rollouts,
training, saving) and each as a ratio against `yaml` (the first variant run when `yaml` is not among them). It
times: run it alone. The result file (`--out`, default `tests/benchmarks/results/memory_grpo/<cpu>_<bf16
units>.json`, one per CPU kind) holds the figures (`run`, `steps`, `cpu_count` and `variants`: each one's flags,
peaks and seconds, as before), the table `variants` it prints, and the provenance (result_file.py); `--beside`
says what shared the cores.

Measured 2026-12-05 on the 2-core development machine, nothing beside it, 3 steps, before the YAML got
`bound_cpu_heap: true` (so every variant below ran without it unless it says heap; peak RSS GiB / seconds):
checkpointing + compact + small tiles (the YAML then) 5.45 / 155 s; before 11.80 / 154 (TRL's tiles, no
checkpointing, no compaction, heap unbounded); no checkpointing 8.83 / 140; TRL's tiles 5.76 / 148; every
position scored 5.62 / 148; no reference model 5.03 / 134; + bounded heap (**the YAML now**) 3.79 / 174
(1.12x). A second call: the YAML then 5.33 / 158; half batch 4.93 / 141; half batch + bounded heap 3.91 / 189.
Seconds move by ~10% between calls of the same variant (rollout lengths differ), so only the heap's cost is
more than noise; peak RSS repeats to ~0.1 GiB.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from render_tables import markdown_table
from result_file import NOT_RECORDED, cpu_kind, write_result

from r3forge.backends.vllm_server import ServeLLMConfig, VLLMServer
from r3forge.procmem import TreePeak, gib

RESULTS = Path(__file__).parent / "results" / "memory_grpo"

NO_HEAP = ["--bound_cpu_heap", "false"]
TRL_TILES = ["--cpu_lm_head_tile_tokens", "4096", "--cpu_lm_head_tile_vocab", "32768"]
VARIANTS = {
    "yaml": [],
    "before": ["--gradient_checkpointing", "false", "--compact_cpu_lm_head", "false", *TRL_TILES, *NO_HEAP],
    "no_checkpointing": ["--gradient_checkpointing", "false"],
    "trl_tiles": TRL_TILES,
    "no_compact": ["--compact_cpu_lm_head", "false"],
    "no_ref": ["--beta", "0"],
    "no_heap": NO_HEAP,
    "half_batch": ["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2"],
    "padded": ["--packed_step", "false"],
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


def table(figures: dict) -> dict:
    """The table `variants`: per variant, its flags, peak RSS, peak tree RSS and seconds, each with its ratio
    against `yaml` (or the first variant when `yaml` did not run).

    >>> variants = {"yaml": {"flags": [], "peak_rss_gib": 3.79, "peak_tree_rss_gib": 4.5, "seconds": 174.0},
    ...             "no_ref": {"flags": ["--beta", "0"], "peak_rss_gib": 3.41, "peak_tree_rss_gib": 4.05,
    ...                        "seconds": 134.0}}
    >>> t = table({"variants": variants})
    >>> t["columns"][3], t["rows"][0][1], t["rows"][1]
    ('vs yaml', '(as shipped)', ['no_ref', '--beta 0', '3.41', '0.90x', '4.05', '0.90x', '134', '0.77x'])
    """
    variants = figures["variants"]
    ref_name = "yaml" if "yaml" in variants else next(iter(variants))
    ref, keys, rows = variants[ref_name], ("peak_rss_gib", "peak_tree_rss_gib", "seconds"), []
    for name, r in variants.items():
        ratio = {k: (r[k] / ref[k] if r[k] and ref[k] else float("nan")) for k in keys}
        rows.append([name, " ".join(r["flags"]) or "(as shipped)", f"{r['peak_rss_gib']:.2f}",
                     f"{ratio['peak_rss_gib']:.2f}x", f"{r['peak_tree_rss_gib']:.2f}",
                     f"{ratio['peak_tree_rss_gib']:.2f}x", f"{r['seconds']:.0f}", f"{ratio['seconds']:.2f}x"])  # fmt: skip
    vs = f"vs {ref_name}"
    columns = ["variant", "flags", "peak RSS GiB", vs, "peak tree RSS GiB", vs, "seconds", vs]
    return {"columns": columns, "align": "llrrrrrr", "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a finished quickstart run folder")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument(
        "--workdir", default=None, help="where the variants' run folders go (default: a temp dir)"
    )
    ap.add_argument("--out", default=None, help="result file (default: results/memory_grpo/<cpu kind>.json)")
    ap.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
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
    figures = {"run": str(run), "steps": args.steps, "cpu_count": os.cpu_count(),
               "variants": {n: {"flags": VARIANTS[n], **r} for n, r in rows.items()}}  # fmt: skip
    out = Path(args.out) if args.out else RESULTS / f"{cpu_kind()}.json"
    write_result(out, figures, {"variants": table(figures)}, beside=args.beside)
    ref_name = "yaml" if "yaml" in rows else next(iter(rows))
    print(f"\nGRPO CPU recipe, {args.steps} steps, {os.cpu_count()} cores; ratios against `{ref_name}`\n")
    print("\n".join(markdown_table(table(figures))))
    print(f"\nresult: {out}")


if __name__ == "__main__":
    main()
