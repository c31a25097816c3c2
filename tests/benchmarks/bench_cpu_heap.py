"""CPU training heap: glibc's default allocator vs a fixed mmap threshold vs a heap trim after every step.

    .venv/bin/python tests/benchmarks/bench_cpu_heap.py [--steps 12] [--batch 8] [--min_len 150] [--max_len 700]

Each mode runs in its own process: the embedded SmolLM2-135M, AdamW, bf16 autocast, `--steps` forward +
backward + optimizer steps on batches of random length (seeded, the same sequence in every mode), as an SFT
run's variable-length batches are. Modes:

* `default`: glibc as it is (its mmap threshold rises after each large free, up to 32 MiB, and the freed
  blocks then stay on the heap);
* `mmap`: `bound_cpu_heap()` (blocks of 1 MiB and more always mmapped, returned to the OS on free);
* `trim`: `malloc_trim(0)` after every step (free heap pages handed back, allocation left as it is).

Reported per mode: seconds per step (steps 3.., after warm-up), peak RSS and RSS after the last step, and
each as a ratio against `default`. Run it alone: it times. The result file (`--out`, default
`tests/benchmarks/results/cpu_heap/<cpu kind>.json`) holds the figures, the table `modes` and the provenance
(result_file.py); `--beside nothing` says that nothing shared the cores.

Measured on 2 CPU cores, alone (2026-12-02, `--steps 10`, batch 8, lengths 150-700, random tokens):

| mode | s/step | vs default | peak RSS MiB | vs default | final RSS MiB | vs default |
|:---|---:|---:|---:|---:|---:|---:|
| default | 8.23 | 1.00x | 13997 | 1.00x | 10317 | 1.00x |
| mmap | 10.97 | 1.33x | 10141 | 0.72x | 2561 | 0.25x |
| trim | 9.17 | 1.11x | 12676 | 0.91x | 2359 | 0.23x |

So the SFT recipe leaves glibc alone by default (`bound_cpu_heap: true` opts into `mmap` for long runs
near the memory limit).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
from render_tables import markdown_table
from result_file import NOT_RECORDED, cpu_kind, write_result
from transformers import AutoModelForCausalLM

from r3forge.models import resolve_model
from r3forge.training.cpu import bound_cpu_heap

MODES = ("default", "mmap", "trim")
RESULTS = Path(__file__).parent / "results" / "cpu_heap"


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def run_mode(mode: str, steps: int, batch: int, min_len: int, max_len: int) -> dict:
    if mode == "mmap":
        assert bound_cpu_heap(), "mallopt refused"
    libc = ctypes.CDLL("libc.so.6")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m-instruct"), dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    gen = torch.Generator().manual_seed(0)
    times, rss = [], []
    for _ in range(steps):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=gen))
        ids = torch.randint(0, model.config.vocab_size, (batch, length), generator=gen)  # (B, T)
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if mode == "trim":
            libc.malloc_trim(0)
        times.append(time.perf_counter() - start)
        rss.append(rss_mib())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "s_per_step": sum(times[2:]) / max(len(times) - 2, 1),
        "peak_rss_mib": peak,
        "final_rss_mib": rss[-1],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--min_len", type=int, default=150)
    ap.add_argument("--max_len", type=int, default=700)
    ap.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    ap.add_argument("--out", default=None, help="result file (default: results/cpu_heap/<cpu kind>.json)")
    ap.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one mode, in a child process
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.steps, args.batch, args.min_len, args.max_len)))
        return
    results = {}
    for mode in MODES:
        argv = [sys.executable, __file__, "--mode", mode, "--steps", str(args.steps), "--batch", str(args.batch),
                "--min_len", str(args.min_len), "--max_len", str(args.max_len)]  # fmt: skip
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        results[mode] = json.loads(out.strip().splitlines()[-1])
        print(mode, results[mode], file=sys.stderr)
    settings = {"steps": args.steps, "batch": args.batch, "min_len": args.min_len, "max_len": args.max_len}
    print("\n".join(markdown_table(table(results))))
    out = Path(args.out) if args.out else RESULTS / f"{cpu_kind()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_result(out, {"settings": settings, "modes": results}, {"modes": table(results)}, beside=args.beside)
    print(f"result: {out}")


def table(results: dict[str, dict]) -> dict:
    """Per mode: seconds per step, peak and final RSS, each with its ratio against `default`.

    >>> t = table({"default": {"s_per_step": 8.0, "peak_rss_mib": 100.0, "final_rss_mib": 50.0},
    ...            "trim": {"s_per_step": 9.0, "peak_rss_mib": 90.0, "final_rss_mib": 10.0}})
    >>> t["rows"][1]
    ['trim', '9.00', '1.12x', '90', '0.90x', '10', '0.20x']
    """
    base = results["default"]
    rows = []
    for mode, r in results.items():
        rows.append([mode, f"{r['s_per_step']:.2f}", f"{r['s_per_step'] / base['s_per_step']:.2f}x",
                     f"{r['peak_rss_mib']:.0f}", f"{r['peak_rss_mib'] / base['peak_rss_mib']:.2f}x",
                     f"{r['final_rss_mib']:.0f}", f"{r['final_rss_mib'] / base['final_rss_mib']:.2f}x"])  # fmt: skip
    columns = ["mode", "s/step", "vs default", "peak RSS MiB", "vs default", "final RSS MiB", "vs default"]
    return {"columns": columns, "align": "lrrrrrr", "rows": rows}


if __name__ == "__main__":
    main()
