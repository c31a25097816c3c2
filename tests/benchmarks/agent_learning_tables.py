"""The tables and plots of tests/benchmarks/bench_agent_grpo_seeds.sh, from its run folder.

    .venv/bin/python tests/benchmarks/agent_learning_tables.py tests/benchmarks/results/agent_seeds

It reads the bench's ledger (agent_ledger.py: finished runs, committed) or a run folder of the bench: the same
layout, except that a ledger's runs each carry the evaluation of their own warm start (eval_0) and its rows are
gzipped.

Per arm (raw passages / the extractive stand-in / the distilled student), over its training seeds:
1. held-out EM of the warm start and of every checkpoint (mean over the seeds, min-max in brackets);
2. at the last step: EM, its gain over the warm start with a 95% interval that resamples the seeds and the
   questions (`metrics/stats.py: seeds_bootstrap`), F1, searches per question, RA-R, CUE-R, the share of
   tied GRPO groups (every rollout of a question's group got the same reward: no gradient; TRL's
   `frac_reward_zero_std`, mean over the steps and seeds) and the training reward of the first and last 8 steps;
3. per seed: its gain over its own warm start (interval over the questions), tied groups and reward;
4. the differences between arms at the last step (student - raw, extractive - raw, student - extractive), the
   same interval; seed i of one arm is set against seed i of the other; a verdict (beats, ties, loses to) only
   with three seeds in both arms, "beats" only where the interval excludes zero.
Plots: RUN_DIR/em_vs_steps.png (mean EM per checkpoint, each seed thin) and RUN_DIR/reward_curves.png (the
training reward, 8-step moving mean, averaged over seeds). Everything printed also goes to RUN_DIR/tables.json:
the figures, each table as `render_tables.py` prints it into a guide (`tables`: em_by_step, final, per_seed,
compare), each run's machine and commit (`runs`, from the ledger's run.json) and this command's provenance.
Only (arm, seed) runs with every checkpoint evaluated count; the others are listed as unfinished.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import sys
from pathlib import Path

import matplotlib.pyplot as plt
from render_tables import markdown_table
from result_file import write_result

from r3forge.metrics.stats import seeds_bootstrap

ARMS = ("raw", "extractive", "student")
COMPARE = (("student", "raw"), ("extractive", "raw"), ("student", "extractive"))
CLAIM_SEEDS = 3  # a learning claim (beats / loses to) needs three training seeds in both arms


def load_rows(d: Path) -> dict[str, dict]:
    f = d / "rows.jsonl"
    text = f.read_text() if f.is_file() else gzip.decompress((d / "rows.jsonl.gz").read_bytes()).decode()
    return {r["id"]: r for r in map(json.loads, text.splitlines())}


def summary(d: Path) -> dict:
    return json.loads((d / "summary.json").read_text())


def logged_steps(d: Path) -> list[dict]:
    """The run's logged GRPO steps: the metrics.jsonl lines with a reward (the final summary line has none)."""
    lines = (d / "grpo" / "metrics.jsonl").read_text().splitlines()
    return [x for x in map(json.loads, lines) if "reward" in x]


def training(d: Path) -> tuple[list[float], float, float]:
    """A run's training: the share of tied groups at each logged step, the mean reward of the first and last 8."""
    logged = logged_steps(d)
    tied = [x["frac_reward_zero_std"] for x in logged if "frac_reward_zero_std" in x]
    return tied, *(statistics.mean(x["reward"] for x in part) for part in (logged[:8], logged[-8:]))


def runs(r: Path, arm: str) -> tuple[dict[int, Path], list[int], list[str]]:
    """{seed: run folder} of the arm's finished runs (every checkpoint evaluated), their steps, unfinished."""
    found, unfinished, steps = {}, [], []
    for d in sorted(r.glob(f"{arm}_s*")):
        m = re.fullmatch(rf"{arm}_s(\d+)", d.name)
        if not m:
            continue
        metrics = d / "grpo" / "final_metrics.json"
        evals = sorted(
            int(e.name.removeprefix("eval_")) for e in d.glob("eval_*") if (e / "summary.json").is_file()
        )
        evals = [s for s in evals if s > 0]  # eval_0: a ledger run's own warm start
        if not metrics.is_file() or not evals or evals[-1] != json.loads(metrics.read_text())["logged_steps"]:
            unfinished.append(d.name)
            continue
        found[int(m.group(1))], steps = d, evals
    return found, steps, unfinished


def show(out: dict, name: str, title: str, table: dict) -> None:
    """Print one table under its title and keep it in the result file's `tables`."""
    out.setdefault("tables", {})[name] = table
    print(f"\n### {title}\n")
    print("\n".join(markdown_table(table)))


def table_em(arms: dict, out: dict) -> None:
    steps = sorted({s for a in arms.values() for s in a["steps"]})
    table = {
        "columns": ["arm", "seeds", "0 (warm start)", *map(str, steps)],
        "align": "lrr" + "r" * len(steps),
    }
    table["rows"] = []
    for arm, a in arms.items():
        cells = []
        for s in steps:
            ems = [summary(d / f"eval_{s}")["em"] for d in a["runs"].values()] if s in a["steps"] else []
            cells.append(f"{statistics.mean(ems):.3f} ({min(ems):.3f}-{max(ems):.3f})" if ems else "")
            out.setdefault("em_by_step", {}).setdefault(arm, {})[s] = ems
        before = [b["em"] for b in a["before"].values()]
        table["rows"].append([arm, len(a["runs"]), spread(before), *cells])
        out["em_by_step"][arm][0] = before
    show(out, "em_by_step", "Held-out EM by GRPO step (greedy; mean over seeds, min-max)", table)


def spread(xs: list[float]) -> str:
    """'0.330' for equal values (one warm start for every seed), else 'mean (min-max)'."""
    if min(xs) == max(xs):
        return f"{xs[0]:.3f}"
    return f"{statistics.mean(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def em_table(a: dict, step: int) -> list[list[float]]:
    """[seeds][questions] EM at `step` (0: each seed's warm start), in a fixed question order."""
    ids = a["ids"]
    if step == 0:
        return [[float(a["before_rows"][seed][i]["em"]) for i in ids] for seed in a["runs"]]
    return [[float(load_rows(d / f"eval_{step}")[i]["em"]) for i in ids] for d in a["runs"].values()]


def table_final(arms: dict, out: dict) -> None:
    columns = ["arm", "seeds", "steps", "EM", "EM - warm start [95% CI]", "F1", "searches / q", "RA-R", "CUE-R",
               "tied groups", "reward first 8 -> last 8"]  # fmt: skip
    table = {"columns": columns, "align": "lrrrlrrrrrl", "rows": []}
    for arm, a in arms.items():
        last = a["steps"][-1]
        gain = seeds_bootstrap(em_table(a, 0), em_table(a, last))
        sums = [summary(d / f"eval_{last}") for d in a["runs"].values()]
        mean = {k: statistics.mean(s[k] for s in sums if s[k] is not None) for k in ("em", "f1", "searches_per_question", "ra_r", "cue_r")}  # fmt: skip
        tied, first, final = [], [], []
        for d in a["runs"].values():
            ties, start, end = training(d)
            tied += ties
            first.append(start)
            final.append(end)
        row = mean | {"seeds": sorted(a["runs"]), "steps": last, "gain": gain, "tied_groups": statistics.mean(tied),
                      "reward_first8": statistics.mean(first), "reward_last8": statistics.mean(final),
                      "warm_start": {k: mean_of(a["before"], k) for k in ("em", "f1", "ra_r", "cue_r")}}  # fmt: skip
        out.setdefault("final", {})[arm] = row
        table["rows"].append([arm, len(a["runs"]), last, f"{mean['em']:.3f}", interval(gain), f"{mean['f1']:.3f}",
                              f"{mean['searches_per_question']:.2f}", f"{mean['ra_r']:.3f}", f"{mean['cue_r']:.3f}",
                              f"{row['tied_groups']:.3f}", f"{row['reward_first8']:.3f} -> {row['reward_last8']:.3f}"])  # fmt: skip
        w = {k: mean_of(a["before"], k) for k in ("em", "f1", "searches_per_question", "ra_r", "cue_r")}
        table["rows"].append([f"{arm} warm start", "", 0, f"{w['em']:.3f}", "", f"{w['f1']:.3f}",
                              f"{w['searches_per_question']:.2f}", f"{w['ra_r']:.3f}", f"{w['cue_r']:.3f}", "", ""])  # fmt: skip
    title = "At the last step: the gain over the warm start (95% CI over seeds and questions)"
    show(out, "final", title, table)


def interval(x: tuple[float, float, float]) -> str:
    """A difference and its interval as a cell.

    >>> interval((0.0321, -0.01, 0.07))
    '+0.032 [-0.010, +0.070]'
    """
    return f"{x[0]:+.3f} [{x[1]:+.3f}, {x[2]:+.3f}]"


def table_seeds(arms: dict, out: dict) -> None:
    table = {
        "columns": ["arm", "seed", "EM - warm start [95% CI]", "tied groups", "reward first 8 -> last 8"]
    }
    table |= {"align": "lrlrl", "rows": []}
    for arm, a in arms.items():
        last = a["steps"][-1]
        for seed, before, after in zip(a["runs"], em_table(a, 0), em_table(a, last), strict=True):
            gain = seeds_bootstrap([before], [after])  # one seed: resamples the questions only
            ties, first, final = training(a["runs"][seed])
            tied = statistics.mean(ties)
            out.setdefault("per_seed", {}).setdefault(arm, {})[seed] = {
                "gain": gain, "tied_groups": tied, "reward_first8": first, "reward_last8": final
            }  # fmt: skip
            table["rows"].append([arm, seed, interval(gain), f"{tied:.3f}", f"{first:.3f} -> {final:.3f}"])
    show(
        out,
        "per_seed",
        "Per seed: the gain over its own warm start at the last step (95% CI over questions)",
        table,
    )


def mean_of(summaries: dict[int, dict], key: str) -> float:
    """The mean of `key` over the seeds' warm-start summaries (one warm start: its value)."""
    return statistics.mean(x[key] for x in summaries.values())


def table_compare(arms: dict, out: dict) -> None:
    pairs = [(x, y) for x, y in COMPARE if x in arms and y in arms]
    if not pairs:
        return
    columns = ["comparison", "seeds", "steps", "difference [95% CI]", "verdict", "warm starts' difference"]
    table = {"columns": columns, "align": "lrrlll", "rows": []}
    for x, y in pairs:
        seeds = sorted(set(arms[x]["runs"]) & set(arms[y]["runs"]))
        last = min(arms[x]["steps"][-1], arms[y]["steps"][-1])
        if not seeds or last not in arms[x]["steps"] or last not in arms[y]["steps"]:
            continue
        ax, ay = (arms[a] | {"runs": {s: arms[a]["runs"][s] for s in seeds}} for a in (x, y))
        diff = seeds_bootstrap(em_table(ay, last), em_table(ax, last))
        base = seeds_bootstrap(em_table(ay, 0), em_table(ax, 0))
        out.setdefault("compare", {})[f"{x} - {y}"] = {
            "seeds": seeds,
            "steps": last,
            "diff": diff,
            "warm_starts": base,
        }
        said = (
            verdict(diff, x, y)
            if len(seeds) >= CLAIM_SEEDS
            else f"no claim ({len(seeds)} of {CLAIM_SEEDS} seeds)"
        )
        table["rows"].append([f"{x} - {y}", len(seeds), last, interval(diff), said, interval(base)])
    show(out, "compare", "Between arms at the last step (EM, 95% CI over seeds and questions)", table)


def verdict(diff: tuple[float, float, float], x: str, y: str) -> str:
    """'x beats y' / 'x loses to y' only where the paired interval excludes zero, else 'tie'.

    >>> verdict((0.05, 0.01, 0.09), "student", "raw"), verdict((0.05, -0.01, 0.09), "student", "raw")
    ('student beats raw', 'tie')
    """
    if diff[1] > 0:
        return f"{x} beats {y}"
    if diff[2] < 0:
        return f"{x} loses to {y}"
    return "tie"


def plots(r: Path, arms: dict) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for arm, a in arms.items():
        xs = [0, *a["steps"]]
        per_seed = [
            [a["before"][seed]["em"]] + [summary(d / f"eval_{s}")["em"] for s in a["steps"]]
            for seed, d in a["runs"].items()
        ]
        mean = [statistics.mean(col) for col in zip(*per_seed, strict=True)]
        line = ax.plot(xs, mean, marker="o", label=f"{arm} (mean of {len(per_seed)} seeds)")[0]
        for ys in per_seed:
            ax.plot(xs, ys, color=line.get_color(), alpha=0.3, linewidth=0.8)
    finish(fig, ax, ("GRPO steps", "held-out EM (greedy)"), r / "em_vs_steps.png")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for arm, a in arms.items():
        curves = []
        for d in a["runs"].values():
            logged = [x["reward"] for x in logged_steps(d)]
            curves.append([statistics.mean(logged[max(0, i - 7) : i + 1]) for i in range(len(logged))])
        n = min(map(len, curves))
        ax.plot(
            range(1, n + 1),
            [statistics.mean(c[i] for c in curves) for i in range(n)],
            label=f"{arm} ({len(curves)} seeds)",
        )
    finish(fig, ax, ("GRPO step", "training reward (8-step mean, mean of seeds)"), r / "reward_curves.png")


def finish(fig: plt.Figure, ax: plt.Axes, labels: tuple[str, str], path: Path) -> None:
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"\nplot: {path}")


def recorded(d: Path) -> dict:
    """Where and from which commit a ledger run came (its run.json); {} for a run folder, which has none."""
    f = d / "run.json"
    if not f.is_file():
        return {}
    keep = ("cpu", "cpu_flags", "torch_threads", "torch", "commit", "recorded", "uncommitted_changes")
    return {k: v for k, v in json.loads(f.read_text()).items() if k in keep}


def main(r: Path) -> int:
    arms, out = {}, {"run_dir": str(r)}
    for arm in ARMS:
        found, steps, unfinished = runs(r, arm)
        if unfinished:
            print(f"{arm}: unfinished (not counted): {', '.join(unfinished)}")
        # each run's own warm start (a ledger's eval_0), else the run folder's one warm start of the arm
        starts = {
            seed: d / "eval_0" if (d / "eval_0").is_dir() else r / f"{arm}_eval_0"
            for seed, d in found.items()
        }
        found = {seed: d for seed, d in found.items() if (starts[seed] / "summary.json").is_file()}
        if found:
            before_rows = {seed: load_rows(starts[seed]) for seed in found}
            arms[arm] = {"runs": found, "steps": steps, "before": {seed: summary(starts[seed]) for seed in found},
                         "before_rows": before_rows, "ids": sorted(next(iter(before_rows.values())))}  # fmt: skip
    if not arms:
        print(f"{r}: no finished (arm, seed) run yet")
        return 1
    if (r / "student_path.txt").is_file():
        out["student"] = (r / "student_path.txt").read_text().strip()
        print(f"student: {out['student']}")
    table_em(arms, out)
    table_final(arms, out)
    table_seeds(arms, out)
    table_compare(arms, out)
    plots(r, arms)
    out["runs"] = {f"{arm}_s{seed}": recorded(d) for arm, a in arms.items() for seed, d in a["runs"].items()}
    write_result(r / "tables.json", out, out.pop("tables"))
    print(f"written: {r / 'tables.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/bench_agent_seeds")))
