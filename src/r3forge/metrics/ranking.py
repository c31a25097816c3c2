"""Ranking metrics: NDCG@k (graded), Recall@k, Precision@k, MRR, Spearman correlation and ROC AUC.

A ranking is a list of doc ids, best first. Relevance (``qrels``) is either a dict doc_id -> grade (docs
missing from it have grade 0; its values are all the judged docs) or a list of grades aligned with the
ranking (then the ranking is the whole judged pool). A grade > 0 means relevant; negative grades count as
0, as in trec_eval.

Conventions follow trec_eval (``pytrec_eval``) and the tests compare against it:

- ``ndcg_at_k`` with ``gain="linear"`` is trec_eval ``ndcg_cut_k``: gain = grade, discount log2(rank + 1),
  ideal DCG from the k best judged grades. ``gain="exponential"`` uses 2**grade - 1 (Burges et al.).
- ``recall_at_k`` divides by the number of relevant judged docs; ``precision_at_k`` divides by k even when
  the ranking is shorter (trec_eval ``P_k``).
- A query with no relevant doc scores 0.0 on every metric (trec_eval does the same).

The ``*_batch`` functions take aligned lists over queries and return float64 arrays; the per-query
functions are thin wrappers over them.
"""

from collections.abc import Hashable, Mapping, Sequence
from typing import Literal

import numpy as np
from scipy.stats import rankdata, spearmanr

Qrels = Mapping[Hashable, float] | Sequence[float]


def _grades(ranking: Sequence[Hashable], qrels: Qrels, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Grades of the ranked docs and grades of all judged docs, negatives clipped to 0."""
    if isinstance(qrels, Mapping):
        if len(set(ranking)) != len(ranking):
            raise ValueError(f"{where}: ranking has duplicate doc ids")
        ranked = np.array([qrels.get(d, 0) for d in ranking], dtype=np.float64)
        judged = np.array(list(qrels.values()), dtype=np.float64)
    else:
        if len(qrels) != len(ranking):
            raise ValueError(f"{where}: {len(qrels)} grades for a ranking of {len(ranking)} docs")
        ranked = judged = np.asarray(qrels, dtype=np.float64)
    return np.clip(ranked, 0, None), np.clip(judged, 0, None)


def _padded(rows: list[np.ndarray], width: int) -> np.ndarray:
    """Stack 1-D arrays into a (len(rows), width) matrix, truncating or zero-padding each row."""
    out = np.zeros((len(rows), width), dtype=np.float64)
    for i, row in enumerate(rows):
        row = row[:width]
        out[i, : len(row)] = row
    return out


def _prepare(
    rankings: Sequence[Sequence[Hashable]], qrels_list: Sequence[Qrels]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    if len(rankings) != len(qrels_list):
        raise ValueError(f"length mismatch: {len(rankings)} rankings vs {len(qrels_list)} qrels")
    pairs = [_grades(r, q, f"query {i}") for i, (r, q) in enumerate(zip(rankings, qrels_list, strict=True))]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _check_k(k: int) -> None:
    if not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")


def ndcg_batch(
    rankings: Sequence[Sequence[Hashable]],
    qrels_list: Sequence[Qrels],
    k: int,
    gain: Literal["linear", "exponential"] = "linear",
) -> np.ndarray:
    """NDCG@k per query (see module docstring for the conventions).

    >>> ndcg_batch([["d1", "d2"], ["d3"]], [{"d2": 1}, {"d3": 2, "d4": 1}], k=2).round(4)
    array([0.6309, 0.7602])
    """
    _check_k(k)
    if gain not in ("linear", "exponential"):
        raise ValueError(f"gain must be 'linear' or 'exponential', got {gain!r}")
    ranked, judged = _prepare(rankings, qrels_list)
    dcg_gains = _padded(ranked, k)
    ideal_gains = _padded([np.sort(j)[::-1] for j in judged], k)
    if gain == "exponential":
        dcg_gains, ideal_gains = np.exp2(dcg_gains) - 1, np.exp2(ideal_gains) - 1
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    dcg, idcg = dcg_gains @ discount, ideal_gains @ discount
    return np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg > 0)


def recall_batch(rankings: Sequence[Sequence[Hashable]], qrels_list: Sequence[Qrels], k: int) -> np.ndarray:
    """Recall@k per query: relevant docs in the top k / relevant judged docs (0.0 if none is relevant).

    >>> recall_batch([["d1", "d2", "d3"]], [{"d2": 1, "d3": 2, "d9": 1}], k=2)
    array([0.33333333])
    """
    _check_k(k)
    ranked, judged = _prepare(rankings, qrels_list)
    hits = (_padded(ranked, k) > 0).sum(axis=1)
    n_rel = np.array([(j > 0).sum() for j in judged], dtype=np.float64)
    return np.divide(hits, n_rel, out=np.zeros_like(n_rel), where=n_rel > 0)


def precision_batch(
    rankings: Sequence[Sequence[Hashable]], qrels_list: Sequence[Qrels], k: int
) -> np.ndarray:
    """Precision@k per query: relevant docs in the top k / k (trec_eval ``P_k``).

    >>> precision_batch([["d1", "d2"]], [{"d2": 1}], k=4)
    array([0.25])
    """
    _check_k(k)
    ranked, _ = _prepare(rankings, qrels_list)
    return (_padded(ranked, k) > 0).sum(axis=1) / k


def mrr_batch(
    rankings: Sequence[Sequence[Hashable]], qrels_list: Sequence[Qrels], at_k: int | None = None
) -> np.ndarray:
    """Reciprocal rank of the first relevant doc per query (0.0 if none in the top ``at_k``; all if None).

    >>> mrr_batch([["d1", "d2"], ["d3"]], [{"d2": 1}, {"d4": 1}])
    array([0.5, 0. ])
    """
    if at_k is not None:
        _check_k(at_k)
    ranked, _ = _prepare(rankings, qrels_list)
    width = at_k if at_k is not None else max((len(r) for r in ranked), default=0)
    relevant = _padded(ranked, max(width, 1)) > 0
    first = relevant.argmax(axis=1)
    return np.where(relevant.any(axis=1), 1.0 / (first + 1), 0.0)


def ndcg_at_k(
    ranking: Sequence[Hashable], qrels: Qrels, k: int, gain: Literal["linear", "exponential"] = "linear"
) -> float:
    """NDCG@k of one ranking; ``gain="linear"`` matches trec_eval ``ndcg_cut_k``.

    >>> round(ndcg_at_k(["d1", "d2", "d3"], {"d1": 1, "d3": 2}, k=3), 4)
    0.7602
    >>> round(ndcg_at_k(["d1", "d2", "d3"], [1, 0, 2], k=3, gain="exponential"), 4)
    0.6885
    """
    return float(ndcg_batch([ranking], [qrels], k, gain)[0])


def recall_at_k(ranking: Sequence[Hashable], qrels: Qrels, k: int) -> float:
    """Recall@k of one ranking.

    >>> recall_at_k(["d1", "d2"], {"d2": 1, "d5": 3}, k=2)
    0.5
    """
    return float(recall_batch([ranking], [qrels], k)[0])


def precision_at_k(ranking: Sequence[Hashable], qrels: Qrels, k: int) -> float:
    """Precision@k of one ranking.

    >>> precision_at_k(["d1", "d2"], {"d2": 1}, k=2)
    0.5
    """
    return float(precision_batch([ranking], [qrels], k)[0])


def mrr(ranking: Sequence[Hashable], qrels: Qrels, at_k: int | None = None) -> float:
    """Reciprocal rank of the first relevant doc of one ranking (MRR is its mean over queries).

    >>> mrr(["d1", "d2", "d3"], {"d3": 1})
    0.3333333333333333
    >>> mrr(["d1", "d2", "d3"], {"d3": 1}, at_k=2)
    0.0
    """
    return float(mrr_batch([ranking], [qrels], at_k)[0])


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation with average ranks for ties (`scipy.stats.spearmanr`).

    Returns nan when either side is constant (its ranks have zero variance) or holds a nan.
    Raises ValueError for different lengths or fewer than 2 points.

    >>> round(spearman([1, 2, 3, 4], [10, 20, 30, 25]), 4)
    0.8
    >>> round(spearman([1, 2, 2, 3], [1, 2, 3, 4]), 4)
    0.9487
    >>> spearman([1, 1, 1], [1, 2, 3])
    nan
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D of the same length, got shapes {x.shape} and {y.shape}")
    if len(x) < 2:
        raise ValueError(f"spearman needs at least 2 points, got {len(x)}")
    if np.isnan(x).any() or np.isnan(y).any() or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")  # scipy warns (ConstantInputWarning) and returns nan for a constant side
    return float(np.clip(spearmanr(x, y).statistic, -1.0, 1.0))


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float | None:
    """ROC AUC: the probability that a random positive scores above a random negative, ties counting half
    (the Mann-Whitney U statistic over average ranks; equal to `sklearn.metrics.roc_auc_score`). None when
    the labels hold only one class.

    >>> roc_auc([0.9, 0.8, 0.3, 0.1], [1, 1, 0, 0]), roc_auc([0.5, 0.5, 0.5], [1, 0, 1])
    (1.0, 0.5)
    >>> roc_auc([0.2, 0.4], [1, 1]) is None
    True
    """
    s, y = np.asarray(scores, dtype=np.float64), np.asarray(labels)
    if s.shape != y.shape or s.ndim != 1:
        raise ValueError(f"scores and labels must be 1-D of the same length, got {s.shape} and {y.shape}")
    positives, negatives = int((y == 1).sum()), int((y == 0).sum())
    if positives + negatives != len(y):
        raise ValueError("labels must be 0 or 1")
    if positives == 0 or negatives == 0:
        return None
    ranks = rankdata(s)  # average ranks for ties
    return float((ranks[y == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives))
