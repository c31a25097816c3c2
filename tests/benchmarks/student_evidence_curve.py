"""Table and plot of the evidence-keeping student's learning curve (tests/benchmarks/student_evidence_curve.sh).

    .venv/bin/python tests/benchmarks/student_evidence_curve.py runs/student_evidence_curve [--beside nothing]
    .venv/bin/python tests/benchmarks/student_evidence_curve.py --tables tests/benchmarks/figures/student_cite.json

Per student (ROOT/ps<N>): training rows, its last epoch's task metrics on the held-out pairs, and its observations
on the learning bench's fixed searches (observations.json of tests/benchmarks/bench_observation_evidence.py): RA-R,
hop recall and quote faithfulness, with paired bootstrap intervals (over questions for RA-R, over queries for hop
recall) against raw passages and against the extractive stand-in. Written to ROOT/curve.json (`points`, the
tables `curve` and `references` that the guides render, and the provenance: result_file.py) and ROOT/curve.png.
`--tables FILE` only rewrites a kept result file's tables from its own points.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from render_tables import markdown_table
from result_file import NOT_RECORDED, add_tables, write_result

from r3forge.data.jsonio import write_json
from r3forge.metrics.stats import paired_bootstrap

TASK = ("spearman", "ndcg@3", "quote_rate", "quote_faithfulness")


def student_point(run: Path) -> dict:
    labels = json.loads((run / "rules" / "labels.json").read_text())
    evals = [m for m in map(json.loads, (run / "sft" / "metrics.jsonl").read_text().splitlines())
             if "eval_task_parse_rate" in m]  # fmt: skip
    arms = {a["arm"]: a for a in json.loads((run / "observations.json").read_text())["arms"]}
    student = arms["evidence"]
    point = {"run": str(run), "train_rows": labels["train"], "epochs": round(evals[-1]["epoch"])}
    point |= {k: evals[-1].get(f"eval_task_{k}") for k in TASK}
    point |= {f"obs_{k}": student[k] for k in ("ra_r", "hop_recall", "quote_faithfulness")}
    # against raw: the bench's own intervals; against the extractive stand-in: the same paired bootstrap
    point |= {k: student[k] for k in ("ra_r_minus_raw", "hop_minus_raw")}
    extractive = arms["extractive"]
    point["ra_r_minus_extractive"] = paired_bootstrap(
        extractive["per_question_ra_r"], student["per_question_ra_r"]
    )
    point["hop_minus_extractive"] = paired_bootstrap(extractive["per_query_hop"], student["per_query_hop"])
    point["refs"] = {ref: {k: arms[ref][k] for k in ("ra_r", "hop_recall")} for ref in ("raw", "extractive")}
    return point


def table(points: list[dict]) -> dict:
    """One row per student: its held-out task metrics and the evidence its observations keep, with intervals."""
    ci = lambda d: f"{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]"  # noqa: E731
    columns = ["training rows", "Spearman", "NDCG@3", "quote rate", "quote faithfulness", "RA-R", "hop recall",
               "RA-R - raw", "RA-R - extractive", "hop - extractive"]  # fmt: skip
    rows = [[p["train_rows"], f"{p['spearman']:.3f}", f"{p['ndcg@3']:.3f}", f"{p['quote_rate']:.3f}",
             f"{p['quote_faithfulness'] or 0:.3f}", f"{p['obs_ra_r']:.3f}", f"{p['obs_hop_recall']:.3f}",
             ci(p["ra_r_minus_raw"]), ci(p["ra_r_minus_extractive"]), ci(p["hop_minus_extractive"])]
            for p in points]  # fmt: skip
    return {"columns": columns, "align": "rrrrrrrlll", "rows": rows}


def references(points: list[dict]) -> dict:
    """The two references on the same questions: raw passages and the extractive stand-in."""
    refs = points[-1]["refs"]
    rows = [[name, f"{refs[key]['ra_r']:.3f}", f"{refs[key]['hop_recall']:.3f}"]
            for key, name in (("raw", "raw passages"), ("extractive", "extractive stand-in"))]  # fmt: skip
    return {"columns": ["observations", "RA-R", "hop recall"], "align": "lrr", "rows": rows}


def rewrite_tables(path: Path) -> None:
    """A kept result file's tables from its own points (an older file, a bare list of points, becomes a dict)."""
    data = json.loads(path.read_text())
    if isinstance(data, list):
        write_json(path, {"points": data})
    points = json.loads(path.read_text())["points"]
    add_tables(path, {"curve": table(points), "references": references(points)})
    print("\n".join(markdown_table(table(points))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path, nargs="?", default=Path("runs/student_evidence_curve"))
    ap.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    ap.add_argument("--tables", type=Path, default=None, help="only rewrite this result file's tables")
    args = ap.parse_args(argv)
    if args.tables is not None:
        rewrite_tables(args.tables)
        return 0
    root = args.root
    runs = sorted((p for p in root.glob("ps*") if (p / "observations.json").exists()),
                  key=lambda p: int(p.name[2:]))  # fmt: skip
    if not runs:
        sys.exit(
            f"{root}: no finished student (ps<N>/observations.json); run student_evidence_curve.sh first"
        )
    points = [student_point(p) for p in runs]
    print("\n".join(markdown_table(table(points))))
    print()
    print("\n".join(markdown_table(references(points))))
    refs = points[-1]["refs"]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    rows = [p["train_rows"] for p in points]
    for key, label, color in (("ra_r", "RA-R", "C0"), ("hop_recall", "hop recall", "C1")):
        ax.plot(rows, [p[f"obs_{key}"] for p in points], "o-", color=color, label=f"student {label}")
        ax.axhline(refs["raw"][key], color=color, ls="--", lw=1, label=f"raw {label}")
        ax.axhline(refs["extractive"][key], color=color, ls=":", lw=1, label=f"extractive {label}")
    ax.plot(
        rows,
        [p["quote_rate"] for p in points],
        "s--",
        color="C2",
        label="student quote rate (held-out pairs)",
    )
    ax.set(xscale="log", xlabel="training rows (rule labels, 2 epochs)", ylabel="on held-out questions",
           title="Evidence kept in the student's observations", ylim=(0, 1.02))  # fmt: skip
    ax.minorticks_off()
    ax.set_xticks(rows, [str(r) for r in rows])
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(root / "curve.png", dpi=120)
    write_result(root / "curve.json", {"points": points}, {"curve": table(points), "references": references(points)},
                 beside=args.beside)  # fmt: skip
    print(f"\nwritten: {root / 'curve.json'}, {root / 'curve.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
