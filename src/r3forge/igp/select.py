"""IGP selection: rerank candidates by information gain, admit IG >= T_p, then the unchanged truncation
(Top-M and an optional token guard B), with the paper's deployment controls.

    sel = igp_select(ig=[0.2, -0.1, 0.2, 0.05], nu_question=0.6, tokens=[90, 80, 120, 60],
                     config=SelectConfig(threshold=0.0, top_m=2))
    sel.indices -> [0, 2]     (ties keep the retriever's order)

- T_p = -inf (the default) is pure IG reranking: every candidate is admitted.
- Pass-rate gating (`min_pass`): when fewer than `min_pass` candidates reach T_p, IGP is not trusted for the
  question and the retriever's order is used instead (mode "fallback_pass_rate").
- Uncertainty gating (`gate_nu`): when NU(q) is below `gate_nu` the generator is already sure; IGP is not
  applied and the retriever's order is used (mode "skipped_certain").
Both fallbacks go through the same truncation, so their token cost stays comparable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class SelectConfig:
    threshold: float = field(
        default=-math.inf, metadata={"help": "T_p: admit IG >= T_p (-inf: rerank only)."}
    )
    top_m: int = field(default=5, metadata={"help": "Top-M: passages kept after reranking and admission."})
    token_budget: int | None = field(default=None, metadata={"help": "B: token guard on the kept passages."})
    min_pass: int = field(
        default=0, metadata={"help": "Pass-rate gating: fewer admitted -> retriever order."}
    )
    gate_nu: float | None = field(
        default=None, metadata={"help": "Uncertainty gating: apply IGP only when NU(q) >= gate_nu."}
    )

    def __post_init__(self) -> None:
        if self.top_m < 1:
            raise ValueError(f"top_m must be >= 1, got {self.top_m}")
        if self.token_budget is not None and self.token_budget < 1:
            raise ValueError(f"token_budget must be >= 1 or None, got {self.token_budget}")


@dataclass(frozen=True)
class Selection:
    indices: list[int]  # kept candidates (indices into the retriever's list), in reading order
    mode: str  # "igp", "fallback_pass_rate" or "skipped_certain"
    passed: int  # candidates with IG >= T_p


def rerank_by_ig(ig: Sequence[float]) -> list[int]:
    """Candidate indices by IG, highest first; ties keep the retriever's order.

    >>> rerank_by_ig([0.1, 0.3, 0.1, -0.2])
    [1, 0, 2, 3]
    """
    return sorted(range(len(ig)), key=lambda i: (-ig[i], i))


def truncate(order: Sequence[int], tokens: Sequence[int], top_m: int, token_budget: int | None) -> list[int]:
    """The first `top_m` of `order`, stopping before the passage that would take the total past B.

    >>> truncate([2, 0, 1], tokens=[50, 70, 40], top_m=3, token_budget=100)
    [2, 0]
    >>> truncate([1, 0], tokens=[50, 200], top_m=2, token_budget=100)  # the first alone exceeds B: none
    []
    """
    kept, total = [], 0
    for i in order[:top_m]:
        if token_budget is not None and total + tokens[i] > token_budget:
            break
        kept.append(i)
        total += tokens[i]
    return kept


def igp_select(
    ig: Sequence[float], nu_question: float, tokens: Sequence[int], config: SelectConfig
) -> Selection:
    """Rerank by IG, admit IG >= T_p, truncate; or the retriever's order when a gate says so.

    >>> cfg = SelectConfig(threshold=0.0, top_m=2, min_pass=1)
    >>> igp_select([0.2, -0.1, 0.2, 0.05], 0.6, [90, 80, 120, 60], cfg)
    Selection(indices=[0, 2], mode='igp', passed=3)
    >>> igp_select([-0.2, -0.1], 0.6, [90, 80], cfg)  # nothing passes: retriever order
    Selection(indices=[0, 1], mode='fallback_pass_rate', passed=0)
    """
    if len(ig) != len(tokens):
        raise ValueError(f"{len(ig)} IG values but {len(tokens)} token counts")
    passed = sum(g >= config.threshold for g in ig)
    retriever = list(range(len(ig)))
    if config.gate_nu is not None and nu_question < config.gate_nu:
        return Selection(
            truncate(retriever, tokens, config.top_m, config.token_budget), "skipped_certain", passed
        )
    if passed < config.min_pass:
        return Selection(
            truncate(retriever, tokens, config.top_m, config.token_budget), "fallback_pass_rate", passed
        )
    admitted = [i for i in rerank_by_ig(ig) if ig[i] >= config.threshold]
    return Selection(truncate(admitted, tokens, config.top_m, config.token_budget), "igp", passed)


def ig_stats(ig_values: Sequence[float], threshold: float) -> dict[str, float]:
    """The run's IG distribution: count, pass rate at T_p, mean and quantiles (logged per run).

    >>> ig_stats([0.1, -0.1, 0.3, 0.0], 0.0)["pass_rate"]
    0.75
    """
    values = np.asarray(list(ig_values), dtype=float)
    if values.size == 0:
        return {"count": 0}
    q = np.quantile(values, [0.1, 0.25, 0.5, 0.75, 0.9])
    return {
        "count": int(values.size),
        "pass_rate": round(float((values >= threshold).mean()), 4),
        "mean": round(float(values.mean()), 6),
        **{
            f"q{int(p * 100)}": round(float(v), 6)
            for p, v in zip((0.1, 0.25, 0.5, 0.75, 0.9), q, strict=True)
        },
    }
