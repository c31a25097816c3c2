"""Held-out T_p tuning: chosen on one half of the questions, scored on the other, never on the same ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r3forge.evalrag.tuning import split_of, tuned_comparison, write_tuned


def rows_for(ids: list[str], f1: dict, tk: dict) -> list[dict]:
    """Rows of `none` (threshold None) and `igp` at T_p 0.0 / 0.2 for every question; f1/tk by (method, T_p,
    split) so the tune and test halves can disagree."""
    rows = []
    for q in ids:
        half = split_of(q)
        for method, t in (("none", None), ("igp", 0.0), ("igp", 0.2)):
            rows.append({"dataset": "d", "question_id": q, "method": method, "top_m": 3, "threshold": t,
                         "em": 0.0, "f1": f1[(method, t, half)], "tk": tk[(method, t)]})  # fmt: skip
    return rows


def test_threshold_is_tuned_on_one_half_and_scored_on_the_other(tmp_path: Path):
    ids = [f"q{i}" for i in range(40)]
    assert {split_of(q) for q in ids} == {"tune", "test"}
    # on the tune half T_p = 0.2 looks best; on the test half it is worse than none
    f1 = {("none", None, "tune"): 0.3, ("igp", 0.0, "tune"): 0.35, ("igp", 0.2, "tune"): 0.4,
          ("none", None, "test"): 0.3, ("igp", 0.0, "test"): 0.35, ("igp", 0.2, "test"): 0.1}  # fmt: skip
    tk = {("none", None): 400.0, ("igp", 0.0): 380.0, ("igp", 0.2): 100.0}
    comparison = {c["objective"]: c for c in tuned_comparison(rows_for(ids, f1, tk))}
    best = comparison["f1"]
    assert best["threshold"] == 0.2  # test-half scores:
    assert (best["f1"], best["f1_base"]) == (pytest.approx(0.1), pytest.approx(0.3))
    assert best["n_tune"] + best["n_test"] == 40
    assert best["tk_change"] == 100.0 / 400.0 - 1 and best["target"] is False  # F1 fell on the test half
    assert comparison["savings"]["threshold"] == 0.2  # the highest T_p at F1 >= none's on the tune half
    # the same rows where the test half agrees: the target (F1 >= none, TK <= 50%) is met
    f1[("igp", 0.2, "test")] = 0.31
    (best, _) = tuned_comparison(rows_for(ids, f1, tk))
    assert best["target"] is True and round(best["f1_change_pts"], 6) == 1.0
    written = write_tuned(rows_for(ids, f1, tk), tmp_path)
    assert json.loads((tmp_path / "tuned.json").read_text()) == written
    assert "| d | 3 | - | IGP | f1 | 0.20 |" in (tmp_path / "tuned.md").read_text()


def test_savings_falls_back_to_max_f1_when_no_threshold_keeps_f1():
    ids = [f"q{i}" for i in range(40)]
    f1 = {("none", None, h): 0.5 for h in ("tune", "test")} | {
        ("igp", t, h): 0.2 + t for t in (0.0, 0.2) for h in ("tune", "test")}  # fmt: skip
    tk = {("none", None): 400.0, ("igp", 0.0): 380.0, ("igp", 0.2): 100.0}
    by = {c["objective"]: c["threshold"] for c in tuned_comparison(rows_for(ids, f1, tk))}
    assert by == {"f1": 0.2, "savings": 0.2}
    assert tuned_comparison([r for r in rows_for(ids, f1, tk) if r["method"] != "none"]) == []  # no baseline
