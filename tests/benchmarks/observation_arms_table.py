"""The table of two `eval agent` runs on the same questions: a baseline arm and another, with paired intervals.

    .venv/bin/python tests/benchmarks/observation_arms_table.py BASELINE_EVAL OTHER_EVAL OUT \
        [--names "raw (baseline)" verbal] [--beside nothing]

Each EVAL is an `r3forge eval agent` output folder (summary.json, and rows.jsonl or a ledger's rows.jsonl.gz).
One row per arm: EM, F1, format validity, searches per question, RA-R, CUE-R; then the other arm minus the
baseline on EM and F1, a paired bootstrap 95% interval over the questions both answered
(`r3forge.metrics.stats.paired_bootstrap`) and a verdict ("beats" only where the interval excludes zero). OUT is
the result file (figures, the table `arms`, provenance: result_file.py). bench_agent_observation_hotpotqa.sh
ends with it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent_learning_tables import interval, load_rows, summary, verdict
from render_tables import markdown_table
from result_file import NOT_RECORDED, write_result

from r3forge.metrics.stats import paired_bootstrap

COLUMNS = ("em", "f1", "format_ok", "searches_per_question", "ra_r", "cue_r")


def compare(base: Path, other: Path) -> dict:
    """The figures: each arm's summary columns and the paired differences (other - base) on EM and F1."""
    a, b = load_rows(base), load_rows(other)
    ids = sorted(set(a) & set(b))  # paired: the questions both arms answered
    diff = {
        k: paired_bootstrap([float(a[i][k]) for i in ids], [float(b[i][k]) for i in ids])
        for k in ("em", "f1")
    }
    return {
        "arms": [{k: summary(d)[k] for k in COLUMNS} | {"eval": str(d)} for d in (base, other)],
        "paired_questions": len(ids),
        "difference": diff,
    }


def table(figures: dict, names: tuple[str, str]) -> dict:
    """Rows: the baseline, the other arm, and other - baseline with its interval and verdict.

    >>> arm = {"em": 0.5, "f1": 0.5, "format_ok": 1.0, "searches_per_question": 1.0, "ra_r": 0.6, "cue_r": 0.8}
    >>> t = table({"arms": [arm, arm], "paired_questions": 40,
    ...            "difference": {"em": (0.1, 0.02, 0.2), "f1": (0.0, -0.1, 0.1)}}, ("raw", "verbal"))
    >>> t["rows"][2]
    ['verbal - raw (paired 95% CI, 40 q)', '+0.100 [+0.020, +0.200]', '+0.000 [-0.100, +0.100]', '', '', '', '', 'verbal beats raw on EM']
    """
    rows = [
        [name, *(f"{arm[c]:.3f}" for c in COLUMNS), ""]
        for name, arm in zip(names, figures["arms"], strict=True)
    ]
    em, f1 = figures["difference"]["em"], figures["difference"]["f1"]
    said = f"{verdict(em, names[1], names[0])} on EM"
    n = figures["paired_questions"]
    rows.append(
        [f"{names[1]} - {names[0]} (paired 95% CI, {n} q)", interval(em), interval(f1), "", "", "", "", said]
    )
    columns = ["observation", "EM", "F1", "format ok", "searches / q", "RA-R", "CUE-R", "verdict"]
    return {"columns": columns, "align": "lrrrrrrl", "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base", type=Path, help="the baseline arm's eval agent folder")
    ap.add_argument("other", type=Path, help="the compared arm's eval agent folder")
    ap.add_argument("out", type=Path, help="the result file to write")
    ap.add_argument("--names", nargs=2, default=["raw (baseline)", "verbal"], help="the two arms' names")
    ap.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    args = ap.parse_args(argv)
    figures = compare(args.base, args.other) | {"names": args.names}
    arms = table(figures, tuple(args.names))
    print("\n".join(markdown_table(arms)))
    write_result(args.out, figures, {"arms": arms}, beside=args.beside)
    print(f"result: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
