"""The tables of a single-turn RAG evaluation sweep: per-question rows aggregated into a table shaped like
Table 4 of the IGP paper (Song et al. 2026, arXiv:2601.17532); its three PNG plots (Figs. 1, 3 and 4) and
the writer of the whole report are in `plots.py`:

    paths = write_report(load_eval_rows("runs/eval/rows.jsonl"), "runs/eval/report")   # plots.write_report

Each row is one (dataset, question, method, top_m, threshold, token_budget) of `r3forge eval rag`; method
"none" (the retriever's order) is the baseline. Rows are grouped by `config_key` and averaged:

- EM, F1 and NDCG@k / Recall@k stay fractions in [0, 1] in the summary (as in the rows); only the markdown
  table and the plots show F1 in percent.
- TK is the mean final-stage input tokens (the generator's prompt tokens).
- NTE (`r3forge.metrics.efficiency.nte`) is taken against the "none" group of the same dataset, top_m and
  token_budget; it is None when that group is missing or the NTE is undefined (baseline F1 = 0, TK = 0).
- For rows that carry an IGP `mode`, `modes` counts the modes and `n_fallback` the questions that were not
  pruned by IGP (pass-rate fallback or uncertainty skip).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from r3forge.data.jsonio import iter_json_records
from r3forge.errors import DataFormatError
from r3forge.metrics.efficiency import nte

BASELINE = "none"
REQUIRED = ("dataset", "question_id", "method", "top_m", "em", "f1", "tk")
RANK_FIELD = re.compile(r"^(ndcg|recall)@(\d+)$")
KEY_FIELDS = ("dataset", "method", "top_m", "threshold", "token_budget")

ConfigKey = tuple[str, str, int, float | None, int | None]


def config_key(row: Mapping[str, Any]) -> ConfigKey:
    """The group of a row: (dataset, method, top_m, threshold, token_budget); missing optionals are None.

    >>> config_key({"dataset": "hotpotqa", "method": "igp", "top_m": 3, "threshold": 0.0})
    ('hotpotqa', 'igp', 3, 0.0, None)
    """
    return (row["dataset"], row["method"], row["top_m"], row.get("threshold"), row.get("token_budget"))


def config_label(row: Mapping[str, Any]) -> str:
    """A short name for a row's or a summary group's method config (without dataset and M).

    >>> config_label({"method": "igp", "threshold": 0.0})
    'IGP (T_p=0.00)'
    >>> config_label({"method": "none", "threshold": None, "token_budget": 512})
    'none (B=512)'
    >>> config_label({"method": "igp", "threshold": float("-inf")})
    'IGP (T_p=-inf)'
    >>> config_label({"method": "igp+qream", "threshold": 0.1})
    'IGP+qream (T_p=0.10)'
    """
    name = re.sub(r"^igp(?=$|\+)", "IGP", str(row["method"]))
    parts = []
    if row.get("threshold") is not None:
        parts.append(f"T_p={row['threshold']:.2f}")
    if row.get("token_budget") is not None:
        parts.append(f"B={row['token_budget']}")
    return f"{name} ({', '.join(parts)})" if parts else name


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_row(i: int, row: Any) -> None:
    """Raise ValueError naming row `i` and the field when the row cannot be aggregated."""
    if not isinstance(row, Mapping):
        raise ValueError(f"row {i}: expected a JSON object, got {type(row).__name__}")
    for name in REQUIRED:
        if row.get(name) is None:
            raise ValueError(f"row {i}: required field {name!r} is missing or null")
    where = f"row {i} (dataset={row['dataset']!r}, question_id={row['question_id']!r})"
    if not isinstance(row["dataset"], str) or not isinstance(row["method"], str):
        raise ValueError(f"{where}: fields 'dataset' and 'method' must be strings")
    if not isinstance(row["top_m"], int) or isinstance(row["top_m"], bool) or row["top_m"] < 1:
        raise ValueError(f"{where}: field 'top_m' must be a positive int, got {row['top_m']!r}")
    for name, hi in (("em", 1.0), ("f1", 1.0), ("tk", math.inf)):
        if not _is_number(row[name]) or not 0 <= row[name] <= hi:
            raise ValueError(f"{where}: field {name!r} must be a number in [0, {hi}], got {row[name]!r}")
    thr, budget = row.get("threshold"), row.get("token_budget")
    if thr is not None and (not _is_number(thr) or math.isnan(thr)):
        raise ValueError(f"{where}: field 'threshold' must be a number or null, got {thr!r}")
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool)):
        raise ValueError(f"{where}: field 'token_budget' must be an int or null, got {budget!r}")
    for name, value in row.items():
        if RANK_FIELD.match(name) and value is not None and not _is_number(value):
            raise ValueError(f"{where}: field {name!r} must be a number or null, got {value!r}")


def validated_rows(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    rows = list(rows)
    for i, row in enumerate(rows):
        _check_row(i, row)
    return rows


def none_first(value: float | None) -> tuple[bool, float]:
    return (value is not None, value if value is not None else 0.0)


def _config_order(group: Mapping[str, Any]) -> tuple:
    """Within a dataset and M: budget (none first), the baseline before other methods, T_p (none first)."""
    method = group["method"]
    return (none_first(group["token_budget"]), method != BASELINE, method, none_first(group["threshold"]))


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def aggregate(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One summary dict per config group, sorted by dataset, M, budget, method (baseline first), T_p.

    Keys: dataset, method, top_m, threshold, token_budget, label, n, em, f1, tk, nte, the means of every
    ndcg@k / recall@k field present (None when all null), modes (IGP mode counts, None when no row has a
    mode) and n_fallback. EM/F1/NDCG/Recall are fractions. Raises ValueError naming the row index and field
    for a row that lacks a required field, and for a question that appears twice in one group.
    """
    groups: dict[ConfigKey, list[Mapping[str, Any]]] = defaultdict(list)
    seen: dict[tuple, int] = {}
    for i, row in enumerate(validated_rows(rows)):
        key = config_key(row)
        first = seen.setdefault((*key, str(row["question_id"])), i)
        if first != i:
            raise ValueError(f"row {i}: question_id {row['question_id']!r} repeats row {first} in {key}")
        groups[key].append(row)
    summary = []
    for key, members in groups.items():
        group: dict[str, Any] = dict(zip(KEY_FIELDS, key, strict=True))
        group["label"], group["n"] = config_label(group), len(members)
        for name in ("em", "f1", "tk"):
            group[name] = _mean([float(r[name]) for r in members])
        group["nte"] = None
        fields = {f: RANK_FIELD.match(f) for r in members for f in r}
        for name in sorted((f for f, m in fields.items() if m), key=lambda f: (f[0], int(f.split("@")[1]))):
            group[name] = _mean([float(r[name]) for r in members if r.get(name) is not None])
        modes = Counter(str(r["mode"]) for r in members if r.get("mode") is not None)
        group["modes"] = dict(sorted(modes.items())) if modes else None
        group["n_fallback"] = sum(c for m, c in modes.items() if m != "igp") if modes else None
        summary.append(group)
    base = {(g["dataset"], g["top_m"], g["token_budget"]): g for g in summary if g["method"] == BASELINE}
    for g in summary:
        b = base.get((g["dataset"], g["top_m"], g["token_budget"]))
        if b is not None and b["tk"] > 0 and g["tk"] > 0 and b["f1"] > 0:
            g["nte"] = nte(g["f1"], g["tk"], b["f1"], b["tk"])
    return sorted(summary, key=lambda g: (g["dataset"], g["top_m"], _config_order(g)))


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def table_markdown(summary: Sequence[Mapping[str, Any]], datasets: Sequence[str] | None = None) -> str:
    """Table 4 of the IGP paper in markdown: a block per M, a row per (method, T_p, B), F1 (%) / TK / NTE per
    dataset and their mean over the datasets ("Avg": only for configs present in every dataset shown). The
    best F1 of each column within an M block is bold (all of them when tied at the shown precision)."""
    datasets = list(datasets) if datasets is not None else sorted({g["dataset"] for g in summary})
    shown = [g for g in summary if g["dataset"] in datasets]
    if not shown:
        return "_no results_\n"
    cells = {(g["dataset"], g["top_m"], _config_order(g)): g for g in shown}
    head = ["Method", *(f"{c} {m}" for c in [*datasets, "Avg"] for m in ("F1", "TK", "NTE"))]
    lines = [
        "F1 in %, TK = mean generator input tokens, NTE = F1 per token relative to `none` at the same M and B.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join([":---"] + ["---:"] * (len(head) - 1)) + "|",
    ]
    for top_m in sorted({g["top_m"] for g in shown}):
        configs = {_config_order(g): g["label"] for g in shown if g["top_m"] == top_m}
        block = []  # (label, [[f1, tk, nte] per dataset, then Avg])
        for order, label in sorted(configs.items()):
            per_ds = [cells.get((ds, top_m, order)) for ds in datasets]
            vals = [[g[f] if g else None for f in ("f1", "tk", "nte")] for g in per_ds]
            vals.append([None if None in col else float(np.mean(col)) for col in zip(*vals, strict=True)])
            block.append((label, vals))
        f1s = [[v[0] for v in vals] for _, vals in block]
        best = [max((f for f in col if f is not None), default=None) for col in zip(*f1s, strict=True)]
        lines.append("| " + " | ".join([f"_TopM={top_m}_"] + [""] * (len(head) - 1)) + " |")
        for label, vals in block:
            row = [label]
            for (f1, tk, eff), top in zip(vals, best, strict=True):
                f1_text = _fmt(None if f1 is None else f1 * 100, ".1f")
                bold = f1 is not None and f1_text == _fmt(top * 100, ".1f")
                row += [f"**{f1_text}**" if bold else f1_text, _fmt(tk, ".0f"), _fmt(eff, ".2f")]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def best_threshold(
    summary: Sequence[Mapping[str, Any]],
    dataset: str,
    top_m: int,
    method: str = "igp",
    token_budget: int | None = None,
) -> float:
    """The T_p with the highest mean F1 for (dataset, M, method, B); F1 ties (within 1e-9) go to the higher
    T_p, which admits fewer passages. Raises ValueError when no group with a threshold matches.

    >>> s = [{"dataset": "d", "top_m": 3, "method": "igp", "threshold": t, "token_budget": None, "f1": f}
    ...      for t, f in [(-0.1, 0.4), (0.0, 0.5), (0.05, 0.5), (0.1, 0.3)]]
    >>> best_threshold(s, "d", 3)
    0.05
    """
    cands = [
        g
        for g in summary
        if g["dataset"] == dataset
        and g["top_m"] == top_m
        and g["method"] == method
        and g.get("token_budget") == token_budget
        and g.get("threshold") is not None
    ]
    if not cands:
        raise ValueError(
            f"no {method!r} groups with a threshold for dataset={dataset!r}, top_m={top_m}, "
            f"token_budget={token_budget}"
        )
    top = max(g["f1"] for g in cands)
    return float(max(g["threshold"] for g in cands if g["f1"] >= top - 1e-9))


def load_eval_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a per-question JSONL file (blank lines skipped). Raises DataFormatError (a ValueError)
    naming file:line for bad JSON or a line that is not a JSON object."""
    path = Path(path)
    rows = []
    for line, record in iter_json_records(path, layout="jsonl"):
        if not isinstance(record, dict):
            raise DataFormatError(path, line, f"expected a JSON object, got {type(record).__name__}")
        rows.append(record)
    return rows
