"""Ranking metrics against trec_eval (pytrec_eval), scikit-learn (exponential-gain NDCG) and scipy (Spearman).

pytrec_eval sorts a run by score and breaks ties by doc id, so runs here get distinct scores.
(ranx is a second reference, but its numba JIT costs ~40 s per fresh process, too slow for this suite.)
"""

import doctest
import math

import numpy as np
import pytest
import pytrec_eval
from scipy.stats import spearmanr
from sklearn.metrics import ndcg_score

from r3forge.metrics import ranking
from r3forge.metrics.ranking import (
    mrr,
    mrr_batch,
    ndcg_at_k,
    ndcg_batch,
    precision_at_k,
    precision_batch,
    recall_at_k,
    recall_batch,
    spearman,
)

KS = (1, 3, 5, 10, 25)


def _random_queries(n: int, seed: int = 0) -> tuple[list[list[str]], list[dict[str, int]]]:
    """Rankings over a per-query pool; qrels judge a random subset (some judged docs are never retrieved)."""
    rng = np.random.default_rng(seed)
    rankings, qrels_list = [], []
    for _ in range(n):
        pool = [f"d{j}" for j in range(rng.integers(2, 30))]
        judged = rng.choice(pool, size=rng.integers(1, len(pool) + 1), replace=False)
        no_relevant = rng.random() < 0.1
        qrels = {d: 0 if no_relevant else int(rng.choice([0, 0, 1, 2, 3])) for d in judged}
        rankings.append(list(rng.permutation(pool)[: rng.integers(1, len(pool) + 1)]))
        qrels_list.append(qrels)
    return rankings, qrels_list


def _trec(rankings: list[list[str]], qrels_list: list[dict[str, int]], measures: set[str]) -> list[dict]:
    qrels = {f"q{i}": q for i, q in enumerate(qrels_list)}
    run = {f"q{i}": {d: float(len(r) - j) for j, d in enumerate(r)} for i, r in enumerate(rankings)}
    out = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    return [out[f"q{i}"] for i in range(len(rankings))]


@pytest.fixture(scope="module")
def queries():
    rankings, qrels_list = _random_queries(400)
    measures = {"recip_rank"} | {f"{m}.{k}" for m in ("ndcg_cut", "recall", "P") for k in KS}
    return rankings, qrels_list, _trec(rankings, qrels_list, measures)


@pytest.mark.parametrize("k", KS)
def test_ndcg_recall_precision_match_trec_eval(queries, k):
    rankings, qrels_list, ref = queries
    np.testing.assert_allclose(
        ndcg_batch(rankings, qrels_list, k), [r[f"ndcg_cut_{k}"] for r in ref], atol=1e-9
    )
    np.testing.assert_allclose(
        recall_batch(rankings, qrels_list, k), [r[f"recall_{k}"] for r in ref], atol=1e-9
    )
    np.testing.assert_allclose(
        precision_batch(rankings, qrels_list, k), [r[f"P_{k}"] for r in ref], atol=1e-9
    )


def test_mrr_matches_trec_eval(queries):
    rankings, qrels_list, ref = queries
    got = mrr_batch(rankings, qrels_list)
    np.testing.assert_allclose(got, [r["recip_rank"] for r in ref], atol=1e-9)
    assert (got > 0).mean() > 0.5 and (got < 1).any()
    for k in (1, 3):  # trec_eval has no cutoff for recip_rank: cut the run instead
        cut = [r[:k] for r in rankings]
        ref_k = [r["recip_rank"] for r in _trec(cut, qrels_list, {"recip_rank"})]
        np.testing.assert_allclose(mrr_batch(rankings, qrels_list, at_k=k), ref_k, atol=1e-9)


def test_ndcg_exponential_matches_sklearn():
    rankings, qrels_list = _random_queries(300, seed=1)
    for k in (1, 3, 10):
        got = ndcg_batch(rankings, qrels_list, k, gain="exponential")
        for ranking_, qrels, value in zip(rankings, qrels_list, got, strict=True):
            # sklearn ranks every doc it is given: append unretrieved judged docs below the ranking.
            docs = ranking_ + [d for d in qrels if d not in set(ranking_)]
            if k > len(ranking_) or len(docs) < 2:
                continue
            y_true = [[2.0 ** qrels.get(d, 0) - 1 for d in docs]]
            y_score = [[float(len(docs) - j) for j in range(len(docs))]]
            assert value == pytest.approx(ndcg_score(y_true, y_score, k=k), abs=1e-9)


def test_hand_computed_values():
    r = ["a", "b", "c", "d"]
    q = {"a": 0, "b": 3, "d": 1, "z": 2}
    dcg = 3 / math.log2(3) + 1 / math.log2(5)
    idcg = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(r, q, 4) == pytest.approx(dcg / idcg)
    exp_dcg = 7 / math.log2(3) + 1 / math.log2(5)
    exp_idcg = 7 + 3 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(r, q, 4, gain="exponential") == pytest.approx(exp_dcg / exp_idcg)
    assert recall_at_k(r, q, 2) == pytest.approx(1 / 3)
    assert precision_at_k(r, q, 4) == 0.5
    assert mrr(r, q) == 0.5
    assert ndcg_at_k(["b", "z", "d"], q, 3) == pytest.approx(1.0)


def test_aligned_grade_list_equals_dict():
    grades = [0, 2, 1, 0, 3]
    docs = ["a", "b", "c", "d", "e"]
    as_dict = dict(zip(docs, grades, strict=True))
    for k in (1, 2, 5, 8):
        assert ndcg_at_k(docs, grades, k) == ndcg_at_k(docs, as_dict, k)
        assert recall_at_k(docs, grades, k) == recall_at_k(docs, as_dict, k)
    assert mrr(docs, grades) == 0.5


def test_edge_cases():
    assert ndcg_at_k([], {"a": 1}, 3) == 0.0 and mrr([], {"a": 1}) == 0.0
    assert ndcg_at_k(["a"], {"a": 0}, 3) == 0.0  # no relevant doc: 0.0, as trec_eval
    assert recall_at_k(["a"], {}, 3) == 0.0
    assert ndcg_at_k(["a", "b"], {"a": -1, "b": 1}, 2) == pytest.approx(1 / math.log2(3))  # negatives count 0
    assert ndcg_batch([], [], 5).shape == (0,)
    with pytest.raises(ValueError, match="duplicate"):
        ndcg_at_k(["a", "a"], {"a": 1}, 2)
    with pytest.raises(ValueError, match="positive int"):
        recall_at_k(["a"], {"a": 1}, 0)
    with pytest.raises(ValueError, match="gain"):
        ndcg_at_k(["a"], {"a": 1}, 1, gain="log")
    with pytest.raises(ValueError, match="length mismatch"):
        mrr_batch([["a"]], [])
    with pytest.raises(ValueError, match="query 0"):
        ndcg_at_k(["a", "b"], [1], 2)


def test_spearman_matches_scipy():
    rng = np.random.default_rng(3)
    n_ties = 0
    for _ in range(400):
        n = int(rng.integers(3, 60))
        x = rng.integers(0, 6, n) if rng.random() < 0.5 else rng.normal(size=n)
        y = rng.integers(0, 4, n) + 0.3 * x if rng.random() < 0.5 else rng.normal(size=n) - x
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        n_ties += len(np.unique(x)) < n
        assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
    assert n_ties > 100


def test_spearman_edge_cases():
    assert spearman([3, 2, 1], [1, 2, 3]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(spearman([1, 2, 3], [5, 5, 5]))
    assert math.isnan(spearman([1, float("nan"), 3], [1, 2, 3]))
    with pytest.raises(ValueError, match="same length"):
        spearman([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="at least 2"):
        spearman([1], [1])


def test_doctests():
    result = doctest.testmod(ranking)
    assert result.attempted > 0 and result.failed == 0
