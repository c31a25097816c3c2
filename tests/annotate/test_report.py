"""Agreement of teacher scores with gold relevance: NDCG@k of the teacher's ranking vs the input order."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from r3forge.annotate.report import agreement, annotation_report, judge_report
from r3forge.annotate.verbal import expected_score
from r3forge.synth.store import ShardSpec, ShardStore, write_manifest


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


def test_report_counts_every_requested_pair_once_and_says_what_it_counts(tmp_path: Path) -> None:
    """A folder with an accepted, a rejected, a failed-then-accepted and a failed pair, of a job of five
    pairs (one never sent) plus a pair of an earlier, larger job: the counts add up over the job's pairs."""

    def record(doc: str, **fields) -> dict:
        return {"key": f"k-{doc}-{len(fields)}", "input": {"question_id": "q1", "doc_id": doc}} | fields

    def answer(doc: str, score: int) -> dict:
        out = {"question_id": "q1", "doc_id": doc, "score": score, "score_logprob": -0.1, "rank": 0}
        return record(doc, output=out | {"score_logprobs": None, "relevance": int(doc == "a")})

    identity = {"step": "verbal_annotation", "version": "v", "model": "m"}
    with ShardStore(tmp_path, ShardSpec(), identity) as store:
        store.append([], [], [record("c", reason="http_500"), record("d", reason="timeout")])
        store.add_faults({"attempts": 9, "retries": 4, "retries_by_cause": {"500": 4}})
        store.append([answer("a", 5), answer("c", 2), answer("z", 1)], [record("b", reason="missing_score")])
    labels = {("q1", d): int(d == "a") for d in "abcde"}  # e: never sent; z: not this job's
    report = annotation_report(str(tmp_path), labels)
    counts = {k: v for k, v in report.items() if k.startswith("pairs_")}
    assert counts == {"pairs_requested": 5, "pairs_annotated": 3, "pairs_accepted": 2, "pairs_rejected": 1,
                      "pairs_failed": 1, "pairs_not_sent": 1}  # fmt: skip
    assert report["reject_reasons"] == {"missing_score": 1} and report["failure_reasons"] == {"timeout": 1}
    assert report["faults"] == {"attempts": 9, "retries": 4, "retries_by_cause": {"500": 4}}
    assert set(report["counts"]) >= set(counts) | {"acceptance_rate", "faults"}
    assert report["acceptance_rate"] == pytest.approx(2 / 3, abs=1e-4)  # rounded to 4 places
    assert report["score_distribution"] == {"1": 0, "2": 1, "3": 0, "4": 0, "5": 1}  # z is not counted
    whole = annotation_report(str(tmp_path))  # `annotate report`: every pair with a record
    assert (whole["pairs_requested"], whole["pairs_accepted"], whole["pairs_not_sent"]) == (5, 3, 0)


def test_faults_of_a_folder_from_before_the_fault_log_come_from_its_manifest(tmp_path: Path) -> None:
    faults = {"retries": 5, "retries_by_cause": {"500": 3, "bad_response": 2}, "timeouts": 1}
    write_manifest(tmp_path, {"failed": 2, "failure_reasons": {"http_500": 2}, "faults": faults})
    assert annotation_report(str(tmp_path))["faults"] == faults


def test_judge_report_counts_add_up_over_the_requested_annotations(tmp_path: Path) -> None:
    def record(key: str, **fields) -> dict:
        return {"key": f"j-{key}", "input": {"annotation_key": key}} | fields

    identity = {"step": "verbal_judge", "version": "v", "model": "m"}
    with ShardStore(tmp_path, ShardSpec(), identity) as store:
        verdicts = [record(k, output={"approved": k != "b"}) for k in "abx"]  # x: not requested
        store.append(verdicts, [record("c", reason="missing_verdict")], [record("d", reason="rate_limited")])
    report = judge_report(str(tmp_path), [{"annotation_key": k} for k in "abcde"])
    counts = {k: v for k, v in report.items() if k.startswith("annotations_")}
    assert counts == {"annotations_requested": 5, "annotations_judged": 2, "annotations_approved": 1,
                      "annotations_rejected": 1, "annotations_failed": 1, "annotations_not_sent": 1}  # fmt: skip
    assert report["approval_rate"] == 0.5 and set(report["counts"]) >= set(counts) | {"approval_rate"}
