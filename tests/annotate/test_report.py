"""Agreement of teacher scores with gold relevance: NDCG@k of the teacher's ranking vs the input order."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from r3forge.annotate.report import agreement, fault_figures
from r3forge.annotate.verbal import expected_score
from r3forge.synth.store import write_manifest


def row(q: str, d: str, score: int, rel: int, rank: int, lp: float | None = -0.1) -> dict:
    return {
        "question_id": q,
        "doc_id": d,
        "score": score,
        "score_logprob": lp,
        "relevance": rel,
        "rank": rank,
    }


def test_agreement_ranks_by_score_then_logprob() -> None:
    rows = [
        row("q1", "a", 2, 0, 0),
        row("q1", "b", 5, 1, 1, lp=-0.9),
        row("q1", "c", 5, 0, 2, lp=-0.2),  # same score as b, higher logprob: ranked first
        row("q2", "x", 1, 0, 0),
        row("q2", "y", 4, 1, 1),
        row("q3", "z", 3, 0, 0),  # no gold pair: not counted in NDCG
    ]
    out = agreement(rows, k_values=(1, 2))
    assert out["questions_with_gold"] == 2
    # q1: teacher order c, b, a -> gold at rank 2: NDCG@1 0, NDCG@2 1/log2(3); q2: y first -> 1
    assert out["ndcg@1"] == pytest.approx(0.5)
    assert out["ndcg@2"] == pytest.approx((1 / math.log2(3) + 1) / 2, abs=1e-4)
    assert out["input_order_ndcg@1"] == 0.0  # input order puts a non-gold pair first in both
    assert out["mean_score_by_relevance"] == {"0": 2.75, "1": 4.5}


def test_a_rejected_gold_pair_counts_as_missed() -> None:
    rows = [row("q1", "a", 3, 0, 0)]
    labels = {("q1", "a"): 0, ("q1", "b"): 1}  # b was annotated but its output was rejected
    assert agreement(rows, labels, k_values=(2,))["ndcg@2"] == 0.0
    assert agreement(rows, k_values=(2,))["questions_with_gold"] == 0


def test_expected_score_ranks_where_the_argmax_is_constant() -> None:
    """A teacher that scores everything 1 still ranks by how much probability it puts on 2..5."""
    lp = math.log
    rows = [
        row("q1", "a", 1, 0, 0) | {"expected_score": expected_score({"1": lp(0.9), "5": lp(0.1)})},
        row("q1", "b", 1, 2, 1) | {"expected_score": expected_score({"1": lp(0.6), "4": lp(0.4)})},
        row("q1", "c", 1, 0, 2) | {"expected_score": None},  # no digit logprobs: its argmax score (1)
    ]
    out = agreement(rows, k_values=(1,))
    assert out["ndcg@1"] == out["input_order_ndcg@1"] == 0.0  # equal scores and logprobs: input order
    assert out["expected_ndcg@1"] == 1.0
    assert out["mean_expected_score_by_relevance"] == {"0": 1.4, "2": 2.2}


def test_no_expected_figures_without_digit_logprobs() -> None:
    out = agreement([row("q1", "a", 2, 0, 0), row("q1", "b", 4, 1, 1)], k_values=(1,))
    assert "expected_ndcg@1" not in out and "mean_expected_score_by_relevance" not in out


def test_fault_figures_come_from_the_run_manifest(tmp_path: Path) -> None:
    faults = {"retries": 5, "retries_by_cause": {"500": 3, "bad_response": 2}, "timeouts": 1}
    write_manifest(tmp_path, {"failed": 2, "failure_reasons": {"http_500": 2}, "faults": faults})
    assert fault_figures(str(tmp_path)) == {"failed": 2, "failure_reasons": {"http_500": 2}, "faults": faults}
    assert fault_figures(str(tmp_path / "none")) == {"failed": 0, "failure_reasons": {}, "faults": {}}
