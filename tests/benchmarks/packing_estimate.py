"""Tokens through the GRPO trainer per optimizer step, TRL's padded step against the packed, mask-aware one,
from recorded rollouts (a run's rollouts.jsonl: prompt_tokens, tokens, policy_tokens per rollout) grouped
the way a config's trainer groups them:

    .venv/bin/python tests/benchmarks/packing_estimate.py --rollouts runs/grpo/agent_world_cpu/rollouts.jsonl \\
        --config configs/grpo/agent_world_cpu.yaml [--beside nothing] [--out runs/packing_estimate.json]

TRL pads a whole generation batch (per_device_train_batch_size x steps_per_generation rollouts, default
steps_per_generation = gradient_accumulation_steps) to its longest prompt and longest completion, then
cuts it into micro-batches of per_device_train_batch_size: every micro-batch is `[B, P_max + C_max]` of the
generation batch. The packed step forwards the real tokens only (`sum(prompt + completion)`), and its head
scores the policy's tokens only (`sum(policy_tokens)`) where TRL's compacted head scores every completion
token. Per optimizer step (one generation batch on one process), as means over the file's generation
batches. Arithmetic only: the rollouts come from wherever the file was recorded (its lengths are those of
that model and config; the config only sets the grouping), so a paper-scale figure needs rollouts recorded
at the paper's lengths.

The result file (`--out`, default `runs/packing_estimate.json`; packing_paper_scale.sh writes
`RUN_DIR/packing_estimate.json`) holds the figures under the keys it always had (the rollouts file, the config,
its grouping and `estimate`'s means and ratios), the table `packing` (printed: tokens forwarded and LM-head
positions per optimizer step, padded, packed and padded / packed) and the provenance (result_file.py). It times
nothing, so what shared the cores (`--beside`) does not change its figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml
from render_tables import markdown_table
from result_file import NOT_RECORDED, write_result


def estimate(rollouts: list[dict], batch: int, steps_per_generation: int) -> dict[str, float]:
    """Means per generation batch of `batch * steps_per_generation` consecutive rollouts (a last, partial
    batch is left out).

    >>> rows = [{"prompt_tokens": 10, "tokens": t, "policy_tokens": t // 2} for t in (10, 30, 20, 40)]
    >>> estimate(rows, batch=2, steps_per_generation=2)["padded_tokens"], estimate(rows, 2, 2)["packed_tokens"]
    (200.0, 140.0)
    """
    size = batch * steps_per_generation
    groups = [rollouts[i : i + size] for i in range(0, len(rollouts) - size + 1, size)]
    if not groups:
        raise SystemExit(f"{len(rollouts)} rollouts: fewer than one generation batch of {size}")
    keys = ("padded_tokens", "packed_tokens", "head_padded", "head_packed")
    total = dict.fromkeys(keys, 0.0)
    for g in groups:
        width = max(r["prompt_tokens"] for r in g) + max(r["tokens"] for r in g)
        total["padded_tokens"] += width * len(g)
        total["packed_tokens"] += sum(r["prompt_tokens"] + r["tokens"] for r in g)
        total["head_padded"] += sum(r["tokens"] for r in g)
        total["head_packed"] += sum(r["policy_tokens"] for r in g)
    out = {k: round(v / len(groups), 1) for k, v in total.items()}
    out |= {"generation_batches": len(groups), "rollouts_per_generation_batch": size,
            "padded_over_packed": round(out["padded_tokens"] / out["packed_tokens"], 3),
            "head_padded_over_packed": round(out["head_padded"] / max(out["head_packed"], 1.0), 3)}  # fmt: skip
    return out


def table(out: dict) -> dict:
    """The table `packing`: per optimizer step, TRL's padded step against the packed one.

    >>> t = table({"padded_tokens": 200.0, "packed_tokens": 140.0, "head_padded": 100.0, "head_packed": 50.0,
    ...            "padded_over_packed": 1.429, "head_padded_over_packed": 2.0})
    >>> t["columns"][1:], t["rows"][0][1:], t["rows"][1][1:]
    (['TRL padded', 'packed', 'padded / packed'], ['200.0', '140.0', '1.429x'], ['100.0', '50.0', '2.000x'])
    """
    rows = [
        ("tokens through the loss forward", "padded_tokens", "packed_tokens", "padded_over_packed"),
        ("LM-head positions scored", "head_padded", "head_packed", "head_padded_over_packed"),
    ]
    return {
        "columns": [
            "per optimizer step (mean over generation batches)",
            "TRL padded",
            "packed",
            "padded / packed",
        ],
        "align": "lrrr",
        "rows": [[name, f"{out[p]:.1f}", f"{out[k]:.1f}", f"{out[r]:.3f}x"] for name, p, k, r in rows],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rollouts", required=True, help="a GRPO run's rollouts.jsonl")
    p.add_argument("--config", required=True, help="the GRPO YAML whose batch grouping to apply")
    p.add_argument("--out", default="runs/packing_estimate.json", help="the result file (JSON)")
    p.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    a = p.parse_args()
    config = yaml.safe_load(Path(a.config).read_text(encoding="utf-8"))
    batch = int(config.get("per_device_train_batch_size", 8))
    steps = int(config.get("steps_per_generation") or config.get("gradient_accumulation_steps", 1))
    rows = [json.loads(line) for line in Path(a.rollouts).read_text(encoding="utf-8").splitlines() if line]
    missing = [i + 1 for i, r in enumerate(rows) if "prompt_tokens" not in r]
    if missing:
        raise SystemExit(f"{a.rollouts}:{missing[0]}: no prompt_tokens (recorded before they were logged)")
    out = {"rollouts": a.rollouts, "config": a.config, "per_device_train_batch_size": batch,
           "steps_per_generation": steps} | estimate(rows, batch, steps)  # fmt: skip
    print(f"{a.rollouts}: {out['generation_batches']} generation batches of {out['rollouts_per_generation_batch']} "
          f"rollouts (per_device_train_batch_size {batch} x steps_per_generation {steps}, from {a.config})\n")  # fmt: skip
    print("\n".join(markdown_table(table(out))))
    write_result(Path(a.out), out, {"packing": table(out)}, beside=a.beside)
    print(f"\nresult: {a.out}")


if __name__ == "__main__":
    main()
