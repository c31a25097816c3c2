"""Is the quickstart's reranker student robust? Its four student stages, run for several quickstart seeds.

    .venv/bin/python tests/benchmarks/bench_quickstart_student.py --seeds 0 1 2 \\
        [--config configs/quickstart.yaml] [--root runs/bench_quickstart_student] [--eval_run runs/quickstart-<t>] \\
        [-- QUICKSTART FLAGS, e.g. --rules_agent_view true --rules_questions 240 --rules_max_per_score 100]

For each seed, the exact command lines of the quickstart's stages `reranker-world`, `export-sft`, `reranker-sft`
and `reranker-export` (`quickstart/plan.py: build_stages` with the config's settings and that `seed`: the
reranker's world is seed + 1, so each seed is another world, other training rows and other held-out pairs) run
into ROOT/seed<s>/ (resumable: a finished stage is skipped). Per seed, from the held-out pairs the student
generates on after SFT (`reranker-sft/task_eval`): parse rate, how many distinct scores it gives (1: a constant
argmax), Spearman against the teacher's scores, NDCG@3 of its ranking against input order and random order
(`quickstart/report.py: heldout_rankings`, the references REPORT.md shows), quote rate and faithfulness. With
`--eval_run` (a finished quickstart run), each student's observations are also measured on that run's held-out
questions (tests/benchmarks/bench_observation_evidence.py: RA-R, hop recall, quote faithfulness).

Targets (issue #43): over every seed, Spearman >= 0.3 and NDCG@3 >= input order + 0.10. Written to
ROOT/results.json (with the table `students` the guides render, and the provenance: result_file.py); trains, so
run it alone when its seconds matter (they are reported, not a target). `--tables FILE` only rewrites an existing
result file's table from its figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from render_tables import markdown_table
from result_file import NOT_RECORDED, add_tables, write_result

from r3forge.config import parse_config
from r3forge.data.jsonio import read_jsonl
from r3forge.quickstart.plan import QuickstartConfig, build_stages
from r3forge.quickstart.report import heldout_rankings

STAGES = ("reranker-world", "export-sft", "reranker-sft", "reranker-export")
DONE = {"reranker-world": "hf", "export-sft": "labels.json", "reranker-sft": "final_metrics.json",
        "reranker-export": "config.json"}  # fmt: skip


def run_stages(config: QuickstartConfig, run: Path) -> dict[str, float]:
    seconds = {}
    for stage in build_stages(config, run):
        if stage.name not in STAGES or (Path(stage.output) / DONE[stage.name]).exists():
            continue
        print(f"== {time.strftime('%H:%M:%S')} seed {config.seed}: {stage.name}", file=sys.stderr, flush=True)
        (run / "logs").mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        with open(run / "logs" / f"{stage.name}.log", "w") as log:
            rc = subprocess.call(
                [str(Path(sys.executable).parent / "r3forge"), *stage.argv], stdout=log, stderr=log
            )
        if rc != 0:
            sys.exit(
                f"seed {config.seed}: stage {stage.name} failed ({rc}); see {run / 'logs' / stage.name}.log"
            )
        seconds[stage.name] = round(time.perf_counter() - start, 1)
    return seconds


def student_metrics(run: Path) -> dict:
    metrics = json.loads((run / "reranker-sft" / "final_metrics.json").read_text())
    after = {k.removeprefix("eval_task_"): v for k, v in (metrics.get("task_after") or {}).items()}
    rows = read_jsonl(sorted((run / "reranker-sft" / "task_eval").glob("step_*.jsonl"))[-1])
    refs = heldout_rankings(run / "reranker-sft" / "task_eval")
    scores = sorted({r["student_score"] for r in rows if r["student_score"] is not None})
    out = {k: after.get(k) for k in ("parse_rate", "score_accuracy", "spearman", "ndcg@3", "expected_ndcg@3",
                                     "quote_rate", "quote_faithfulness")}  # fmt: skip
    out |= {"pairs": len(rows), "distinct_scores": scores, "input_order_ndcg@3": refs["input order"]["ndcg@3"],
            "random_ndcg@3": refs["random order (mean of 100 shuffles)"]["ndcg@3"],
            "precision": json.loads((run / "reranker-sft" / "run.json").read_text()).get("precision")}  # fmt: skip
    rho = out["spearman"]
    out["target_met"] = bool(rho == rho and rho is not None and rho >= 0.3 and out["ndcg@3"] >= out["input_order_ndcg@3"] + 0.10)  # fmt: skip
    return out


def observations(eval_run: Path, run: Path) -> dict:
    """The student's observations on EVAL_RUN's held-out questions, by bench_observation_evidence.py."""
    out = run / "observations.json"
    if not out.exists():
        bench = Path(__file__).with_name("bench_observation_evidence.py")
        cmd = [sys.executable, str(bench), "--run", str(eval_run), "--student", f"student={run / 'reranker'}"]
        subprocess.run([*cmd, "--out", str(out)], check=True)
    (obs,) = [a for a in json.loads(out.read_text())["arms"] if a["arm"] == "student"]
    return {k: v for k, v in obs.items() if not k.startswith("per_")}


def table(results: list[dict]) -> dict:
    """One row per seed: the student's held-out ranking, its quotes, its observations' evidence and the target."""
    columns = ["seed", "parse", "distinct scores", "Spearman", "NDCG@3", "input order", "random", "quote rate",
               "quote faithfulness", "RA-R", "hop recall", "target"]  # fmt: skip
    f = lambda x: "-" if x is None or x != x else f"{x:.3f}"  # noqa: E731
    rows = []
    for r in results:
        o = r.get("observations", {})
        rows.append([r["seed"], f(r["parse_rate"]), spans(r["distinct_scores"]), f(r["spearman"]), f(r["ndcg@3"]),
                     f(r["input_order_ndcg@3"]), f(r["random_ndcg@3"]), f(r["quote_rate"]),
                     f(r["quote_faithfulness"]), f(o.get("ra_r")), f(o.get("hop_recall")),
                     "met" if r["target_met"] else "not met"])  # fmt: skip
    return {"columns": columns, "align": "rrlrrrrrrrrl", "rows": rows}


def spans(scores: list[int]) -> str:
    """The distinct scores a student gave, as runs.

    >>> spans([1, 2, 3, 4, 5]), spans([1, 2, 3, 5]), spans([3])
    ('1-5', '1-3, 5', '3')
    """
    runs, start = [], None
    for i, x in enumerate(scores):
        start = x if start is None else start
        if i + 1 == len(scores) or scores[i + 1] != x + 1:
            runs.append(f"{start}-{x}" if x != start else f"{x}")
            start = None
    return ", ".join(runs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--config", default="configs/quickstart.yaml")
    p.add_argument("--root", type=Path, default=Path("runs/bench_quickstart_student"))
    p.add_argument(
        "--eval_run", type=Path, default=None, help="A finished quickstart run for the RA-R bench."
    )
    p.add_argument(
        "overrides", nargs=argparse.REMAINDER, help="After --: quickstart flags, e.g. -- --reranker_epochs 2"
    )
    p.add_argument("--beside", default=NOT_RECORDED, help="What shared the cores ('nothing' when alone).")
    p.add_argument(
        "--tables", type=Path, default=None, help="Only (re)write this result file's table from its figures."
    )
    args = p.parse_args(argv)
    if args.tables is not None:
        add_tables(args.tables, {"students": table(json.loads(args.tables.read_text())["results"])})
        print("\n".join(markdown_table(table(json.loads(args.tables.read_text())["results"]))))
        return 0
    overrides = args.overrides[1:] if args.overrides[:1] == ["--"] else args.overrides
    results, out = [], args.root / "results.json"
    earlier = (
        {r["seed"]: r["seconds"] for r in json.loads(out.read_text())["results"]} if out.exists() else {}
    )
    for seed in args.seeds:
        (config,) = parse_config(
            (QuickstartConfig,), ["--config", args.config, *overrides, "--seed", str(seed)], prog="bench"
        )
        run = args.root / f"seed{seed}"
        seconds = earlier.get(seed, {}) | run_stages(config, run)  # a stage skipped now: its earlier seconds
        row = {"seed": seed, "seconds": seconds} | student_metrics(run)
        if args.eval_run is not None:
            row["observations"] = observations(args.eval_run, run)
        results.append(row)
        figures = {"config": args.config, "overrides": overrides, "results": results}
        write_result(out, figures, {"students": table(results)}, beside=args.beside)
    print("\n".join(markdown_table(table(results))))
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
