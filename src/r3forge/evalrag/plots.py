"""The plots of a single-turn RAG evaluation sweep (the IGP paper's Figs. 1, 3 and 4) and `write_report`, which
writes the whole report: summary.json and table.md (`report.py`) and the PNGs. Matplotlib's object API on an
Agg canvas: no pyplot, no global backend state.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from r3forge.data.jsonio import write_json
from r3forge.evalrag.report import (
    BASELINE,
    aggregate,
    config_label,
    none_first,
    table_markdown,
    validated_rows,
)
from r3forge.metrics.ranking import spearman

FIG_SIZE = (6.4, 4.4)  # inches; PNGs are FIG_SIZE * DPI pixels
DPI = 100
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def pareto_frontier(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (tk, f1) points that no cheaper-or-equal point matches in F1, by increasing TK.

    >>> pareto_frontier([(100, 0.3), (50, 0.2), (200, 0.25), (300, 0.5), (50, 0.1)])
    [(50, 0.2), (100, 0.3), (300, 0.5)]
    """
    front: list[tuple[float, float]] = []
    for tk, f1 in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or f1 > front[-1][1]:
            front.append((tk, f1))
    return front


def _figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=FIG_SIZE, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)  # attaches itself to fig: no pyplot, no global backend state
    return fig, fig.add_subplot()


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=DPI)
    return path


def _empty(ax: Axes, title: str, message: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, wrap=True)
    ax.set_axis_off()


def plot_pareto(
    summary: Sequence[Mapping[str, Any]], path: str | Path, dataset: str, log_x: bool = False
) -> Path:
    """F1 (%) vs TK of every config of `dataset`, one marker series per method, points annotated with M, and
    the Pareto frontier (best F1 at <= TK) as a step line (IGP paper Fig. 3). Writes a PNG; returns its path."""
    fig, ax = _figure()
    groups = [g for g in summary if g["dataset"] == dataset]
    title = f"{dataset}: F1 vs input tokens"
    if not groups:
        _empty(ax, title, f"no results for dataset {dataset!r}")
        return _save(fig, path)
    for j, method in enumerate(sorted({g["method"] for g in groups}, key=lambda m: (m != BASELINE, m))):
        pts = [(g["tk"], g["f1"] * 100, g["top_m"]) for g in groups if g["method"] == method]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS[j % len(MARKERS)], label=method)
        for tk, f1, top_m in pts:
            ax.annotate(f"M={top_m}", (tk, f1), xytext=(3, 3), textcoords="offset points", fontsize=7)
    front = pareto_frontier((g["tk"], g["f1"] * 100) for g in groups)
    xs, ys = [*(p[0] for p in front), max(g["tk"] for g in groups)], [*(p[1] for p in front), front[-1][1]]
    ax.step(xs, ys, where="post", color="gray", lw=1, label="Pareto frontier", zorder=1)
    if log_x and all(g["tk"] > 0 for g in groups):
        ax.set_xscale("log")
    ax.set(title=title, xlabel="TK (mean generator input tokens)", ylabel="F1 (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _threshold_axis(thresholds: Iterable[float]) -> dict[float, float]:
    """x positions for T_p values: finite ones as they are, -inf / +inf just beyond the finite range."""
    finite = sorted({t for t in thresholds if math.isfinite(t)})
    lo, hi = (finite[0], finite[-1]) if finite else (0.0, 0.0)
    pad = 0.2 * (hi - lo) if hi > lo else 0.1
    pos = {t: t for t in finite}
    pos.update({-math.inf: lo - pad, math.inf: hi + pad})
    return pos


def plot_f1_vs_threshold(
    summary: Sequence[Mapping[str, Any]], path: str | Path, dataset: str, method: str = "igp"
) -> Path:
    """F1 (%, solid) and TK (dotted, right axis) of a thresholded `method` vs T_p for `dataset`, a line per M
    (and B), with the "none" baseline's F1 at the same M as a dashed line (IGP paper Fig. 4). Writes a PNG;
    returns its path."""
    fig, ax = _figure()
    name = config_label({"method": method})
    title = f"{dataset}: {name} F1 and TK vs T_p"
    igp = [
        g for g in summary if g["dataset"] == dataset and g["method"] == method and g["threshold"] is not None
    ]
    if not igp:
        _empty(ax, title, f"no {name} results with a threshold for dataset {dataset!r}")
        return _save(fig, path)
    pos = _threshold_axis(g["threshold"] for g in igp)
    ax_tk = ax.twinx()
    series = sorted({(g["top_m"], none_first(g["token_budget"]), g["token_budget"]) for g in igp})
    for j, (top_m, _, budget) in enumerate(series):
        line = sorted(
            (g for g in igp if (g["top_m"], g["token_budget"]) == (top_m, budget)),
            key=lambda g: g["threshold"],
        )
        at, color = f"M={top_m}" + ("" if budget is None else f", B={budget}"), f"C{j % 10}"
        xs = [pos[g["threshold"]] for g in line]
        ax.plot(xs, [g["f1"] * 100 for g in line], "o-", color=color, label=f"{name} F1, {at}")
        ax_tk.plot(xs, [g["tk"] for g in line], "x:", color=color, label=f"{name} TK, {at}")
        for g in summary:
            if (g["dataset"], g["method"], g["top_m"], g["token_budget"]) == (
                dataset,
                BASELINE,
                top_m,
                budget,
            ):
                ax.axhline(g["f1"] * 100, ls="--", lw=1, color=color, label=f"none F1, {at}")
    ticks = sorted(set(pos[g["threshold"]] for g in igp))
    labels = {v: ("−∞" if t == -math.inf else "+∞" if t == math.inf else f"{t:g}") for t, v in pos.items()}
    ax.set_xticks(ticks, [labels[x] for x in ticks], rotation=45 if len(ticks) > 6 else 0)
    ax.set(title=title, xlabel="T_p (IG admission threshold)", ylabel="F1 (%)")
    ax_tk.set_ylabel("TK (mean generator input tokens)")
    ax.grid(alpha=0.3)
    handles = [h for a in (ax, ax_tk) for h in a.get_legend_handles_labels()[0]]
    ax.legend(handles=handles, fontsize=7, loc="best")
    return _save(fig, path)


def plot_ndcg_vs_f1(
    rows: Iterable[Mapping[str, Any]],
    path: str | Path,
    dataset: str,
    k: int = 5,
    method: str | None = None,
) -> Path:
    """Per-question NDCG@k vs F1 of `dataset` (one `method`, or all, colored by method) with the pooled
    Spearman rho in the title (IGP paper Fig. 1). Rows with a null NDCG@k are skipped; with fewer than 2
    points left the figure says so. Writes a PNG; returns its path."""
    field = f"ndcg@{k}"
    mine = [
        r
        for r in validated_rows(rows)
        if r["dataset"] == dataset and (method is None or r["method"] == method) and r.get(field) is not None
    ]
    fig, ax = _figure()
    title = f"{dataset}: NDCG@{k} vs F1" + ("" if method is None else f" ({method})")
    if len(mine) < 2:
        why = "no graded relevance" if not mine else "only 1 question has graded relevance"
        _empty(ax, title, f"{why} ({field} null or missing): no correlation to show")
        return _save(fig, path)
    rho = spearman([float(r[field]) for r in mine], [float(r["f1"]) for r in mine])
    for j, m in enumerate(sorted({r["method"] for r in mine}, key=lambda m: (m != BASELINE, m))):
        pts = [r for r in mine if r["method"] == m]
        xs, ys = [r[field] for r in pts], [r["f1"] * 100 for r in pts]
        ax.scatter(xs, ys, marker=MARKERS[j % len(MARKERS)], alpha=0.5, label=f"{m} (n={len(pts)})")
    ax.set(title=f"{title}: Spearman ρ = {rho:.3f} (n = {len(mine)})", xlabel=f"NDCG@{k}", ylabel="F1 (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _file_part(name: str) -> str:
    """A dataset name made safe for a file name.

    >>> _file_part("beir/nq test")
    'beir_nq_test'
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def write_report(rows: Iterable[Mapping[str, Any]], out_dir: str | Path, ndcg_k: int = 5) -> dict[str, Path]:
    """Write summary.json (the `aggregate` list; a T_p of -inf is written as -Infinity, as Python's json
    reads it back), table.md and per dataset pareto_<ds>.png, f1_vs_tp_<ds>.png and ndcg_vs_f1_<ds>.png
    under `out_dir`; returns the paths keyed by file stem ("summary", "table", "pareto_<ds>", ...)."""
    rows = validated_rows(rows)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = aggregate(rows)
    paths = {"summary": out / "summary.json", "table": out / "table.md"}
    write_json(paths["summary"], summary, indent=2)
    paths["table"].write_text("# RAG evaluation\n\n" + table_markdown(summary), encoding="utf-8")
    for ds in sorted({g["dataset"] for g in summary}):
        stem = _file_part(ds)
        paths[f"pareto_{stem}"] = plot_pareto(summary, out / f"pareto_{stem}.png", ds)
        paths[f"f1_vs_tp_{stem}"] = plot_f1_vs_threshold(summary, out / f"f1_vs_tp_{stem}.png", ds)
        paths[f"ndcg_vs_f1_{stem}"] = plot_ndcg_vs_f1(rows, out / f"ndcg_vs_f1_{stem}.png", ds, k=ndcg_k)
    return paths
