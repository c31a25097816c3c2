"""The sweep report: aggregated means, NTE against the `none` baseline, the Table 4 markdown, the best T_p,
the three PNGs and the errors on bad rows and bad JSONL lines, on hand-made rows (no models)."""

from __future__ import annotations

import json
import math

import matplotlib.image
import pytest

from r3forge.evalrag.plots import (
    DPI,
    FIG_SIZE,
    plot_f1_vs_threshold,
    plot_ndcg_vs_f1,
    plot_pareto,
    write_report,
)
from r3forge.evalrag.report import aggregate, best_threshold, config_label, load_eval_rows, table_markdown

# (dataset, method, top_m, threshold) -> [(f1, tk) for q1, q2]; means in the comments
SWEEP = {
    ("hotpotqa", "none", 1, None): [(0.5, 100), (0.3, 140)],  # F1 0.40, TK 120
    ("hotpotqa", "igp", 1, 0.0): [(0.6, 80), (0.4, 80)],  # F1 0.50, TK 80: NTE (0.5/80)/(0.4/120) = 1.875
    ("hotpotqa", "igp", 1, 0.05): [(0.5, 60), (0.5, 60)],  # F1 0.50 (tie), TK 60: NTE 2.5
    ("hotpotqa", "none", 3, None): [(0.6, 300), (0.4, 340)],  # F1 0.50, TK 320
    ("hotpotqa", "igp", 3, 0.0): [(0.7, 200), (0.5, 200)],  # F1 0.60, TK 200: NTE 1.92
    ("hotpotqa", "igp", 3, 0.05): [(0.5, 150), (0.3, 150)],  # F1 0.40
    ("nq", "none", 1, None): [(0.2, 100), (0.4, 100)],  # F1 0.30
    ("nq", "igp", 1, 0.0): [(0.3, 90), (0.3, 90)],  # F1 0.30
    ("nq", "igp", 1, 0.05): [(0.1, 50), (0.1, 50)],  # F1 0.10
    ("nq", "none", 3, None): [(0.5, 300), (0.5, 300)],  # F1 0.50
    ("nq", "igp", 3, 0.0): [(0.4, 200), (0.4, 200)],  # F1 0.40
    ("nq", "igp", 3, 0.05): [(0.6, 150), (0.4, 150)],  # F1 0.50, ties the baseline
}


def make_rows() -> list[dict]:
    rows = []
    for (ds, method, top_m, thr), scores in SWEEP.items():
        for i, (f1, tk) in enumerate(scores):
            graded = ds == "hotpotqa"  # nq has no graded relevance: NDCG/Recall null
            mode = None
            if method == "igp":
                mode = "fallback_pass_rate" if (ds, top_m, thr, i) == ("hotpotqa", 1, 0.05, 1) else "igp"
            rows.append({
                "dataset": ds, "question_id": f"q{i + 1}", "method": method, "top_m": top_m,
                "threshold": thr, "token_budget": None, "selected": ["d1"], "answer": "a",
                "em": 1.0 if f1 >= 0.5 else 0.0, "f1": f1, "tk": tk,
                "ndcg@1": (0.2 + f1) / 2 if graded else None, "ndcg@5": f1 if graded else None,
                "recall@5": 1.0 if graded else None,
                "nu_question": 0.6 if method == "igp" else None, "mode": mode,
            })  # fmt: skip
    return rows


def group(summary: list[dict], ds: str, method: str, top_m: int, thr: float | None = None) -> dict:
    (g,) = [
        g
        for g in summary
        if (g["dataset"], g["method"], g["top_m"], g["threshold"]) == (ds, method, top_m, thr)
    ]
    return g


def table_cells(table: str) -> dict[tuple[int, str], list[str]]:
    """(M, row label) -> the row's cells after the label."""
    out, top_m = {}, None
    for line in table.splitlines():
        if not line.startswith("| "):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0].startswith("_TopM="):
            top_m = int(cells[0].strip("_").split("=")[1])
        elif top_m is not None:
            out[top_m, cells[0]] = cells[1:]
    return out


def test_config_label() -> None:
    assert config_label({"method": "igp", "threshold": 0.0, "token_budget": None}) == "IGP (T_p=0.00)"
    assert config_label({"method": "none", "threshold": None}) == "none"
    assert config_label({"method": "igp", "threshold": 0.05, "token_budget": 256}) == "IGP (T_p=0.05, B=256)"


def test_aggregate_means_and_nte() -> None:
    summary = aggregate(make_rows())
    assert len(summary) == len(SWEEP)
    base = group(summary, "hotpotqa", "none", 1)
    assert base["n"] == 2
    assert base["f1"] == pytest.approx(0.4)
    assert base["em"] == pytest.approx(0.5)
    assert base["tk"] == pytest.approx(120)
    assert base["nte"] == 1.0
    assert base["modes"] is None and base["n_fallback"] is None
    assert base["ndcg@5"] == pytest.approx(0.4) and base["ndcg@1"] == pytest.approx(0.3)
    assert base["recall@5"] == 1.0
    igp = group(summary, "hotpotqa", "igp", 1, 0.0)
    assert igp["f1"] == pytest.approx(0.5) and igp["tk"] == pytest.approx(80)
    assert igp["nte"] == pytest.approx((0.5 / 80) / (0.4 / 120)) == pytest.approx(1.875)
    assert igp["label"] == "IGP (T_p=0.00)"
    assert group(summary, "hotpotqa", "igp", 3, 0.0)["nte"] == pytest.approx(1.92)
    fell = group(summary, "hotpotqa", "igp", 1, 0.05)
    assert fell["modes"] == {"fallback_pass_rate": 1, "igp": 1} and fell["n_fallback"] == 1
    nq = group(summary, "nq", "igp", 3, 0.05)
    assert (
        nq["ndcg@5"] is None
        and nq["recall@5"] is None
        and nq["nte"] == pytest.approx(0.5 / 150 / (0.5 / 300))
    )
    # ordering: dataset, M, the baseline first, then T_p
    assert [(g["method"], g["threshold"]) for g in summary[:3]] == [
        ("none", None),
        ("igp", 0.0),
        ("igp", 0.05),
    ]


def test_nte_none_without_baseline() -> None:
    rows = [r for r in make_rows() if not (r["dataset"] == "nq" and r["method"] == "none")]
    summary = aggregate(rows)
    assert group(summary, "nq", "igp", 1, 0.0)["nte"] is None
    assert group(summary, "hotpotqa", "igp", 1, 0.0)["nte"] == pytest.approx(1.875)
    cells = table_cells(table_markdown(summary))
    assert cells[1, "IGP (T_p=0.00)"][5] == "–"  # nq NTE
    assert cells[1, "IGP (T_p=0.00)"][8] == "–"  # Avg NTE needs every dataset


def test_table_markdown() -> None:
    table = table_markdown(aggregate(make_rows()))
    assert "| Method | hotpotqa F1 | hotpotqa TK | hotpotqa NTE | nq F1 | nq TK | nq NTE | Avg F1 |" in table
    cells = table_cells(table)
    assert set(cells) == {
        (m, label) for m in (1, 3) for label in ("none", "IGP (T_p=0.00)", "IGP (T_p=0.05)")
    }
    # hotpotqa, M=1: both IGP thresholds tie at 50.0 and are bold; the baseline is not
    assert cells[1, "none"][:3] == ["40.0", "120", "1.00"]
    assert cells[1, "IGP (T_p=0.00)"][:3] == ["**50.0**", "80", "1.88"]
    assert cells[1, "IGP (T_p=0.05)"][:3] == ["**50.0**", "60", "2.50"]
    # nq, M=1: none and IGP T_p=0 tie at 30.0
    assert [cells[1, label][3] for label in ("none", "IGP (T_p=0.00)", "IGP (T_p=0.05)")] == [
        "**30.0**",
        "**30.0**",
        "10.0",
    ]
    # Avg, M=1: F1 (40+30)/2, (50+30)/2, (50+10)/2; TK and NTE averaged the same way
    assert [cells[1, label][6] for label in ("none", "IGP (T_p=0.00)", "IGP (T_p=0.05)")] == [
        "35.0",
        "**40.0**",
        "30.0",
    ]
    assert cells[1, "IGP (T_p=0.00)"][7:] == ["85", f"{(1.875 + 100 / 90) / 2:.2f}"]
    # M=3 is its own block: the best there is hotpotqa IGP T_p=0 at 60.0
    assert cells[3, "IGP (T_p=0.00)"][0] == "**60.0**" and cells[3, "none"][0] == "50.0"
    assert table_markdown(aggregate(make_rows()), datasets=["nq"]).count("hotpotqa") == 0
    assert "no results" in table_markdown([])


def test_best_threshold_ties_go_to_higher_tp() -> None:
    summary = aggregate(make_rows())
    assert best_threshold(summary, "hotpotqa", 1) == 0.05  # F1 tie at 0.5: the higher T_p, fewer tokens
    assert best_threshold(summary, "hotpotqa", 3) == 0.0
    assert best_threshold(summary, "nq", 3) == 0.05
    with pytest.raises(ValueError, match="no 'igp' groups with a threshold for dataset='squad'"):
        best_threshold(summary, "squad", 1)


def assert_png(path) -> None:
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    image = matplotlib.image.imread(path)
    assert image.shape == (round(FIG_SIZE[1] * DPI), round(FIG_SIZE[0] * DPI), 4)
    assert image[..., :3].std() > 0  # something was drawn


def test_write_report(tmp_path) -> None:
    rows = make_rows()
    paths = write_report(rows, tmp_path / "report")
    stems = ["summary", "table"] + [
        f"{p}_{ds}" for ds in ("hotpotqa", "nq") for p in ("pareto", "f1_vs_tp", "ndcg_vs_f1")
    ]
    assert sorted(paths) == sorted(stems)
    for stem, path in paths.items():
        assert path.parent == tmp_path / "report" and path.stem == stem
        if path.suffix == ".png":
            assert_png(path)
    assert json.loads(paths["summary"].read_text()) == aggregate(rows)
    assert "| _TopM=1_ |" in paths["table"].read_text()


def test_plots_edge_cases(tmp_path) -> None:
    rows = make_rows()
    summary = aggregate(rows)
    # nq has no graded relevance: a figure that says so, not a crash
    assert_png(plot_ndcg_vs_f1(rows, tmp_path / "none.png", "nq"))
    assert_png(plot_ndcg_vs_f1(rows, tmp_path / "igp.png", "hotpotqa", k=1, method="igp"))
    assert_png(plot_ndcg_vs_f1(rows, tmp_path / "k3.png", "hotpotqa", k=3))  # no ndcg@3 field at all
    assert_png(plot_pareto(summary, tmp_path / "log.png", "hotpotqa", log_x=True))
    assert_png(plot_pareto(summary, tmp_path / "missing.png", "squad"))
    # T_p = -inf (rerank only) sits left of the finite thresholds; a budgeted series is a separate line
    extra = [dict(r, threshold=-math.inf) for r in rows if r["threshold"] == 0.0]
    extra += [dict(r, token_budget=128) for r in rows if r["dataset"] == "hotpotqa"]
    assert_png(plot_f1_vs_threshold(aggregate(rows + extra), tmp_path / "sub" / "tp.png", "hotpotqa"))
    assert_png(plot_f1_vs_threshold([g for g in summary if g["method"] == "none"], tmp_path / "no.png", "nq"))
    set_rows = [dict(r, method="igp_set") if r["method"] == "igp" else r for r in rows]
    assert_png(plot_f1_vs_threshold(aggregate(set_rows), tmp_path / "set.png", "nq", method="igp_set"))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("f1", None, r"row 2: required field 'f1' is missing or null"),
        ("tk", "812", r"row 2 \(dataset='hotpotqa', question_id='q1'\): field 'tk' must be a number"),
        ("f1", 55.0, r"row 2 .*field 'f1' must be a number in \[0, 1.0\], got 55.0"),
        ("top_m", 0, r"row 2 .*field 'top_m' must be a positive int"),
        ("ndcg@5", "high", r"row 2 .*field 'ndcg@5' must be a number or null"),
    ],
)
def test_bad_row_names_index_and_field(field, value, message) -> None:
    rows = make_rows()
    if value is None:
        del rows[2][field]
    else:
        rows[2][field] = value
    with pytest.raises(ValueError, match=message):
        aggregate(rows)


def test_duplicate_question_in_group() -> None:
    rows = make_rows()
    with pytest.raises(ValueError, match=r"row 24: question_id 'q1' repeats row 0"):
        aggregate([*rows, dict(rows[0])])


def test_load_rows(tmp_path) -> None:
    rows = make_rows()[:2]
    good = tmp_path / "rows.jsonl"
    good.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n")
    assert load_eval_rows(good) == rows
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n\n" + '{"dataset": "hotpotqa",\n')
    with pytest.raises(ValueError, match=rf"{bad}:3: invalid JSON"):
        load_eval_rows(bad)
    bad.write_text(json.dumps(rows[0]) + "\n[1, 2]\n")
    with pytest.raises(ValueError, match=rf"{bad}:2: expected a JSON object, got list"):
        load_eval_rows(bad)
