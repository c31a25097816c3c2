"""The tables and the reward-curve plot of tests/benchmarks/bench_agent_grpo_learning.sh, from its run folder.

    .venv/bin/python tests/benchmarks/agent_learning_tables.py runs/bench_agent_learning

Per arm (observation verbal from the 135M student / raw / verbal from the extractive stand-in): the held-out
EM, F1, searches per question, RA-R and CUE-R of its warm start and of its GRPO checkpoint (greedy, the same questions), the gain after - before with a paired
bootstrap 95% interval over the questions, and each verbal arm's difference to the raw arm's GRPO checkpoint
(paired the same way). The training reward per step of every arm (and its 8-step moving mean) goes to
RUN_DIR/reward_curves.png. Where tests/benchmarks/bench_agent_grpo_curve.sh ran (RUN_DIR/curve_<arm>), the
held-out EM of each of its checkpoints with its paired gain over the warm start, and RUN_DIR/em_vs_steps.png.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib.pyplot as plt

from r3forge.metrics.stats import paired_bootstrap

ARMS = ("verbal", "raw", "extractive")
COLS = ("em", "f1", "searches_per_question", "ra_r", "cue_r")


def rows(d: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, (d / "rows.jsonl").read_text().splitlines())}


def paired(a: dict[str, dict], b: dict[str, dict], key: str) -> tuple[float, float, float]:
    """b - a on the questions both answered: (mean, low, high) of the paired bootstrap 95% interval."""
    ids = sorted(set(a) & set(b))
    return paired_bootstrap([float(a[i][key]) for i in ids], [float(b[i][key]) for i in ids])


def cell(a: dict[str, dict], b: dict[str, dict], key: str) -> str:
    gain, low, high = paired(a, b, key)
    return f"{gain:+.3f} [{low:+.3f}, {high:+.3f}]"


def table(r: Path) -> None:
    done = [o for o in ARMS if (r / f"eval_{o}_after" / "summary.json").is_file()]
    print("\n### Held-out EM/F1 before and after GRPO (greedy)\n")
    print("| observation | checkpoint | questions | " + " | ".join(COLS) + " |")
    print("|---" * (len(COLS) + 3) + "|")
    for o in done:
        for when in ("before", "after"):
            s = json.loads((r / f"eval_{o}_{when}" / "summary.json").read_text())
            name = "warm start" if when == "before" else f"GRPO ({steps(r, o)} steps)"
            vals = " | ".join(f"{s[c]:.3f}" if s[c] == s[c] else "-" for c in COLS)
            print(f"| {o} | {name} | {s['questions']} | {vals} |")
        before, after = rows(r / f"eval_{o}_before"), rows(r / f"eval_{o}_after")
        print(f"| {o} | **after - before** (paired 95% CI) | {len(set(before) & set(after))} | "
              f"{cell(before, after, 'em')} | {cell(before, after, 'f1')} | | | |")  # fmt: skip
    for o in (o for o in done if o != "raw" and "raw" in done):
        raw, other = rows(r / "eval_raw_after"), rows(r / f"eval_{o}_after")
        print(f"| {o} - raw | after GRPO (paired 95% CI) | {len(set(raw) & set(other))} | "
              f"{cell(raw, other, 'em')} | {cell(raw, other, 'f1')} | | | |")  # fmt: skip
    for o in done:
        m = json.loads((r / f"grpo_{o}" / "final_metrics.json").read_text())
        print(f"\n{o}: training reward, first {m['reward_window']} steps {m['reward_first']:.3f} -> last "
              f"{m['reward_window']} {m['reward_last']:.3f}; {m['train_runtime']:.0f} s; environment "
              f"{m['env']['queries']} queries ({m['env']['unique_queries']} unique)")  # fmt: skip


def steps(r: Path, o: str) -> int:
    return json.loads((r / f"grpo_{o}" / "final_metrics.json").read_text())["logged_steps"]


def plot(r: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for o in ARMS:
        path = r / f"grpo_{o}" / "metrics.jsonl"
        if not path.is_file():
            continue
        logged = [x for x in map(json.loads, path.read_text().splitlines()) if "reward" in x]
        xs, ys = [x["step"] for x in logged], [x["reward"] for x in logged]
        line = ax.plot(xs, ys, alpha=0.35, label=f"{o} (per step)")[0]
        smooth = [sum(ys[max(0, i - 7) : i + 1]) / len(ys[max(0, i - 7) : i + 1]) for i in range(len(ys))]
        ax.plot(xs, smooth, color=line.get_color(), label=f"{o} (8-step mean)")
    finish(fig, ax, ("GRPO step", "mean reward (EM + format)"), r / "reward_curves.png")


def curve(r: Path) -> None:
    """EM after each checkpoint of the longer runs, with the paired gain over the arm's warm start."""
    found = []
    for c in sorted(d for d in r.glob("curve_*") if d.is_dir()):
        o = c.name.removeprefix("curve_")
        before = rows(r / f"eval_{o}_before")
        points = sorted(
            (int(d.name.removeprefix("eval_")), d) for d in c.glob("eval_*") if (d / "summary.json").is_file()
        )
        if not points:
            continue
        print(f"\n### {o}: held-out EM by GRPO step (one run of {points[-1][0]} steps)\n")
        print("| steps | EM | EM gain over the warm start (paired 95% CI) | F1 | searches / q | RA-R |")
        print("|---:|---:|---|---:|---:|---:|")
        s0 = json.loads((r / f"eval_{o}_before" / "summary.json").read_text())
        print(
            f"| 0 (warm start) | {s0['em']:.3f} | | {s0['f1']:.3f} | {s0['searches_per_question']:.2f} | {s0['ra_r']:.3f} |"
        )
        xs, ys, lo, hi = [0], [s0["em"]], [0.0], [0.0]
        for step_, d in points:
            s = json.loads((d / "summary.json").read_text())
            gain, low, high = paired(before, rows(d), "em")
            print(f"| {step_} | {s['em']:.3f} | {gain:+.3f} [{low:+.3f}, {high:+.3f}] | {s['f1']:.3f} | "
                  f"{s['searches_per_question']:.2f} | {s['ra_r']:.3f} |")  # fmt: skip
            xs.append(step_), ys.append(s["em"]), lo.append(gain - low), hi.append(high - gain)
        found.append((o, xs, ys, lo, hi))
    if not found:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for o, xs, ys, lo, hi in found:
        bars = ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=f"{o} (95% CI of the gain)")
        ax.axhline(ys[0], color=bars[0].get_color(), linestyle=":", label=f"{o} warm start")
    finish(fig, ax, ("GRPO steps", "held-out EM (greedy)"), r / "em_vs_steps.png")


def finish(fig: plt.Figure, ax: plt.Axes, labels: tuple[str, str], path: Path) -> None:
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"\nplot: {path}")


if __name__ == "__main__":
    run = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/bench_agent_learning")
    table(run)
    plot(run)
    curve(run)
