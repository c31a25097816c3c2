"""bf16 autocast against fp32 on this CPU: what `bf16: auto` (r3forge.precision) decides, and whether it is
right here. Baseline: fp32.

    .venv/bin/python tests/benchmarks/bench_cpu_precision.py [--beside nothing] [--out FILE]

Two figures, each as seconds of bf16 CPU autocast / seconds of fp32 (above 1: bf16 is slower):
- one matmul [512, 576] x [576, 1536] (a SmolLM2-135M MLP projection over 512 tokens), the median of
  `--reps` calls after a warm-up;
- one training step (forward + backward) of the embedded SmolLM2-135M on a batch of `--batch` rows of
  `--tokens` tokens, the median of `--steps` steps after a warm-up step.
It prints and writes the CPU model (/proc/cpuinfo), its bf16 flags, torch's thread count and what `bf16: auto`
resolved to. Run it alone: it times. The result file (default
`tests/benchmarks/results/cpu_precision/<cpu>_<bf16 units>.json`, one per CPU kind, so the kinds sit side by
side) holds the figures, the table `precision` that the guides render, and the provenance (result_file.py);
`--beside` says what shared the cores.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch
from result_file import NOT_RECORDED, cpu_kind, write_result
from transformers import AutoModelForCausalLM

from r3forge.models import resolve_model
from r3forge.precision import BF16_FLAGS, auto_bf16, cpu_flags, cpu_model

RESULTS = Path(__file__).parent / "results" / "cpu_precision"


def seconds(fn, reps: int) -> float:
    fn()  # warm-up (oneDNN picks and caches its kernels on the first call)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul(bf16: bool, reps: int) -> float:
    a, b = torch.randn(512, 576), torch.randn(576, 1536)

    def once() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            a @ b

    return seconds(once, reps)


def train_step(model, bf16: bool, batch: int, tokens: int, steps: int) -> float:
    ids = torch.randint(
        0, model.config.vocab_size, (batch, tokens), generator=torch.Generator().manual_seed(0)
    )

    def once() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, labels=ids).loss  # [batch, tokens] -> scalar
        loss.backward()
        model.zero_grad(set_to_none=True)

    return seconds(once, steps)


def table(result: dict) -> dict:
    """The guides' table: per figure, fp32 and bf16 autocast milliseconds and their ratio."""
    m, t = result["matmul_s"], result["train_step_s"]
    units = ", ".join(result["bf16_flags"]) or "no bf16 units"
    rows = [
        ["one matmul [512, 576] x [576, 1536]", m],
        [f"one SmolLM2-135M training step, {t['batch']} x {t['tokens']} tokens", t],
    ]
    return {
        "columns": [
            f"{result['cpu']} ({units}), {result['torch_threads']} threads",
            "fp32",
            "bf16 autocast",
            "bf16 / fp32",
        ],
        "align": "lrrr",
        "rows": [[name, ms(r["fp32"]), ms(r["bf16"]), f"{r['ratio_bf16_vs_fp32']:.2f}x"] for name, r in rows],
    }


def ms(seconds: float) -> str:
    """Seconds as a cell: milliseconds below one second, seconds above.

    >>> ms(0.00922), ms(0.7281), ms(2.8594), ms(105.2)
    ('9.2 ms', '728 ms', '2.86 s', '105 s')
    """
    if seconds < 1:
        return f"{seconds * 1e3:.{1 if seconds < 0.1 else 0}f} ms"
    return f"{seconds:.{2 if seconds < 10 else 0}f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20, help="timed matmuls per precision")
    ap.add_argument("--steps", type=int, default=3, help="timed training steps per precision")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    ap.add_argument(
        "--out", default=None, help="result file (default: results/cpu_precision/<cpu kind>.json)"
    )
    args = ap.parse_args()

    bf16_auto, why = auto_bf16({"use_cpu": True})
    result = {
        "cpu": cpu_model(),
        "bf16_flags": sorted(cpu_flags() & set(BF16_FLAGS)),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "bf16_auto": bf16_auto,
        "bf16_auto_why": why,
    }
    fp32, bf16 = matmul(False, args.reps), matmul(True, args.reps)
    result["matmul_s"] = {"fp32": fp32, "bf16": bf16, "ratio_bf16_vs_fp32": bf16 / fp32}
    model = AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m-instruct"), dtype=torch.float32)
    model.train()
    fp32 = train_step(model, False, args.batch, args.tokens, args.steps)
    bf16 = train_step(model, True, args.batch, args.tokens, args.steps)
    result["train_step_s"] = {"fp32": fp32, "bf16": bf16, "ratio_bf16_vs_fp32": bf16 / fp32,
                              "batch": args.batch, "tokens": args.tokens}  # fmt: skip
    out = Path(args.out) if args.out else RESULTS / f"{cpu_kind(result['cpu'], result['bf16_flags'])}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_result(out, result, {"precision": table(result)}, beside=args.beside)
    print(f"CPU {result['cpu']} (bf16 flags: {', '.join(result['bf16_flags']) or 'none'}), "
          f"{result['torch_threads']} torch threads; bf16: auto -> {bf16_auto} ({why})")  # fmt: skip
    for name in ("matmul_s", "train_step_s"):
        r = result[name]
        print(f"{name[:-2]}: fp32 {r['fp32'] * 1e3:.1f} ms, bf16 autocast {r['bf16'] * 1e3:.1f} ms: "
              f"{r['ratio_bf16_vs_fp32']:.2f}x fp32")  # fmt: skip
    print(f"result: {out}")


if __name__ == "__main__":
    main()
