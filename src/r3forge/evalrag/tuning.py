"""IGP at a tuned T_p against the retriever-only baseline, without tuning on the questions it is scored on.

The questions of a run are split in two by a hash of their id: T_p is chosen on the `tune` half, then IGP at
that T_p and `none` are compared on the `test` half, per dataset, M and B. Two choices of T_p:
- `f1`: the highest mean F1 (ties to the higher T_p, `report.best_threshold`), as the IGP paper tunes;
- `savings`: the highest T_p whose F1 on the tune half is still >= `none`'s (the most tokens saved at no F1
  cost there; none such: the `f1` choice). The IGP paper's claim is checked as stated in the issue: F1 not below the
baseline while TK drops by at least half.

    rows = tuned_comparison(load_eval_rows("runs/eval/igp_world_cpu/rows.jsonl"))
    print(tuned_markdown(rows))

`r3forge eval rag` and `eval report` write it as tuned.json and tuned.md next to table.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from r3forge.evalrag.report import BASELINE, aggregate, best_threshold, config_label


def split_of(question_id: Any) -> str:
    """ "tune" or "test", stable across runs and machines (a hash of the id, not of its position).

    >>> [split_of(i) for i in ("q1", "q2", "q3", "q4")]
    ['tune', 'test', 'test', 'tune']
    """
    return "tune" if hashlib.sha256(str(question_id).encode("utf-8")).digest()[0] % 2 else "test"


def savings_threshold(tune: Sequence[Mapping[str, Any]], cell: tuple, method: str) -> float | None:
    """The highest T_p of `method` whose mean F1 is >= the baseline's in `cell` = (dataset, M, B); None when
    no T_p reaches it or the baseline is missing.

    >>> g = [{"dataset": "d", "top_m": 1, "token_budget": None, "method": m, "threshold": t, "f1": f}
    ...      for m, t, f in [("none", None, 0.2), ("igp", 0.0, 0.3), ("igp", 0.1, 0.2), ("igp", 0.2, 0.1)]]
    >>> savings_threshold(g, ("d", 1, None), "igp")
    0.1
    """
    dataset, top_m, budget = cell
    here = [g for g in tune if (g["dataset"], g["top_m"], g["token_budget"]) == (dataset, top_m, budget)]
    base = [g["f1"] for g in here if g["method"] == BASELINE]
    ok = [
        g["threshold"]
        for g in here
        if g["method"] == method and g["threshold"] is not None and base and g["f1"] >= base[0] - 1e-9
    ]
    return float(max(ok)) if ok else None


def tuned_comparison(rows: Iterable[Mapping[str, Any]], method: str = "igp") -> list[dict[str, Any]]:
    """Per (dataset, M, B) with both `method` (with a T_p) and `none` rows, and per objective (`f1`,
    `savings`): the T_p tuned on the tune half and, on the test half, n, F1 and TK of `none` and of `method` at that T_p, the F1 change (points), the TK change
    (fraction) and `target` (F1 >= baseline and TK <= half the baseline's). EM/F1 are fractions."""
    rows = list(rows)
    tune = aggregate(r for r in rows if split_of(r["question_id"]) == "tune")
    test = {
        (g["dataset"], g["method"], g["top_m"], g["threshold"], g["token_budget"]): g
        for g in aggregate(r for r in rows if split_of(r["question_id"]) == "test")
    }
    out = []
    cells = sorted(
        {(g["dataset"], g["top_m"], g["token_budget"]) for g in tune if g["method"] == method},
        key=lambda c: (c[0], c[1], -1 if c[2] is None else c[2]),
    )
    for dataset, top_m, budget in cells:
        try:
            best = best_threshold(tune, dataset, top_m, method, budget)
        except ValueError:
            continue  # `method` without a threshold in this cell
        saving = savings_threshold(tune, (dataset, top_m, budget), method)
        saved = best if saving is None else saving
        base = test.get((dataset, BASELINE, top_m, None, budget))
        for objective, t in (("f1", best), ("savings", saved)):
            mine = test.get((dataset, method, top_m, t, budget))
            if base is None or mine is None:
                continue
            n_tune = next(
                g["n"]
                for g in tune
                if (g["dataset"], g["method"], g["top_m"], g["threshold"], g["token_budget"])
                == (dataset, method, top_m, t, budget)
            )
            out.append(
                {
                    "dataset": dataset,
                    "top_m": top_m,
                    "token_budget": budget,
                    "method": method,
                    "objective": objective,
                    "threshold": t,
                    "n_tune": n_tune,
                    "n_test": mine["n"],
                    "f1_base": base["f1"],
                    "tk_base": base["tk"],
                    "f1": mine["f1"],
                    "tk": mine["tk"],
                    "f1_change_pts": (mine["f1"] - base["f1"]) * 100,
                    "tk_change": mine["tk"] / base["tk"] - 1 if base["tk"] else None,
                    "target": mine["f1"] >= base["f1"] and mine["tk"] <= 0.5 * base["tk"],
                }
            )
    return out


def tuned_markdown(comparison: Sequence[Mapping[str, Any]]) -> str:
    """A markdown table of `tuned_comparison` (F1 in %, TK change in %).

    >>> print(tuned_markdown([{"dataset": "d", "top_m": 5, "token_budget": None, "method": "igp",
    ...     "objective": "savings", "threshold": 0.1, "n_tune": 40, "n_test": 60, "f1_base": 0.1, "tk_base": 400.0, "f1": 0.12,
    ...     "tk": 180.0, "f1_change_pts": 2.0, "tk_change": -0.55, "target": True}]).splitlines()[-1])
    | d | 5 | - | IGP | savings | 0.10 | 40 / 60 | 10.0 | 400 | 12.0 | 180 | +2.0 | -55% | yes |
    """
    if not comparison:
        return "_no IGP rows with a T_p grid and a `none` baseline_\n"
    lines = [
        "T_p tuned on the `tune` half of the questions, scored on the `test` half (split by a hash of the "
        "question id); tuned for `f1`: max F1; for `savings`: the highest T_p with F1 >= none's. "
        "Target: F1 >= none and TK <= 50% of none's.",
        "",
        "| Dataset | M | B | method | tuned for | T_p | n tune / test | none F1 | none TK | IGP F1 | IGP TK | ΔF1 (pts) "
        "| ΔTK | target |",
        "|:---|---:|---:|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for c in comparison:
        budget = "-" if c["token_budget"] is None else str(c["token_budget"])
        tk_change = "-" if c["tk_change"] is None else f"{c['tk_change'] * 100:+.0f}%"
        lines.append(
            f"| {c['dataset']} | {c['top_m']} | {budget} | {config_label({'method': c['method']})} "
            f"| {c['objective']} | {c['threshold']:.2f} | {c['n_tune']} / {c['n_test']} "
            f"| {c['f1_base'] * 100:.1f} | {c['tk_base']:.0f} | {c['f1'] * 100:.1f} | {c['tk']:.0f} "
            f"| {c['f1_change_pts']:+.1f} | {tk_change} | {'yes' if c['target'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def write_tuned(rows: Iterable[Mapping[str, Any]], out_dir: str | Path) -> list[dict[str, Any]]:
    """tuned.json and tuned.md under `out_dir` for IGP (and set-aware IGP when its rows are there)."""
    rows = list(rows)
    comparison = [c for m in ("igp", "igp_set") for c in tuned_comparison(rows, m)]
    out = Path(out_dir)
    (out / "tuned.json").write_text(json.dumps(comparison, indent=1) + "\n", encoding="utf-8")
    (out / "tuned.md").write_text(
        "# Tuned T_p vs retriever-only\n\n" + tuned_markdown(comparison), encoding="utf-8"
    )
    return comparison
