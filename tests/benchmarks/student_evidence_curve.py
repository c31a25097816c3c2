"""Table and plot of the evidence-keeping student's learning curve (tests/benchmarks/student_evidence_curve.sh).

    .venv/bin/python tests/benchmarks/student_evidence_curve.py runs/student_evidence_curve

Per student (ROOT/ps<N>): training rows, its last epoch's task metrics on the held-out pairs, and its observations
on the learning bench's fixed searches (observations.json of tests/benchmarks/bench_observation_evidence.py): RA-R,
hop recall and quote faithfulness, with paired bootstrap intervals (over questions for RA-R, over queries for hop
recall) against raw passages and against the extractive stand-in. Written to ROOT/curve.json and ROOT/curve.png.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

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


def main(root: Path) -> int:
    runs = sorted((p for p in root.glob("ps*") if (p / "observations.json").exists()),
                  key=lambda p: int(p.name[2:]))  # fmt: skip
    if not runs:
        sys.exit(
            f"{root}: no finished student (ps<N>/observations.json); run student_evidence_curve.sh first"
        )
    points = [student_point(p) for p in runs]
    ci = lambda d: f"{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]"  # noqa: E731
    print("| training rows | Spearman | NDCG@3 | quote rate | quote faithfulness | RA-R | hop recall | RA-R - raw | RA-R - extractive | hop - extractive |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
    for p in points:
        print(f"| {p['train_rows']} | {p['spearman']:.3f} | {p['ndcg@3']:.3f} | {p['quote_rate']:.3f} | "
              f"{p['quote_faithfulness'] or 0:.3f} | {p['obs_ra_r']:.3f} | {p['obs_hop_recall']:.3f} | "
              f"{ci(p['ra_r_minus_raw'])} | {ci(p['ra_r_minus_extractive'])} | {ci(p['hop_minus_extractive'])} |")  # fmt: skip
    refs = points[-1]["refs"]
    print(f"\nraw: RA-R {refs['raw']['ra_r']:.3f}, hop recall {refs['raw']['hop_recall']:.3f}; extractive stand-in: "
          f"RA-R {refs['extractive']['ra_r']:.3f}, hop recall {refs['extractive']['hop_recall']:.3f}")  # fmt: skip
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
    (root / "curve.json").write_text(json.dumps(points, indent=1))
    print(f"\nwritten: {root / 'curve.json'}, {root / 'curve.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/student_evidence_curve")))
