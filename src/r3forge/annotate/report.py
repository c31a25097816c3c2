"""What a verbal annotation run produced, in figures: how its pairs ended (requested = accepted + rejected
+ failed + not sent; `report.json`'s `counts` says what each count counts), reject and failure reasons,
the teacher's faults over every run, the score distribution and the agreement of the teacher's scores with
gold relevance (NDCG@k of the teacher's ranking). `judge_report`: the same counts for a judge run.

    print(format_report(annotation_report("runs/annotate/verbal_hotpotqa_cpu")))

The teacher ranks each question's annotated documents by score, ties broken by the score token's logprob
(the Verbal-R3 ranking); beside it, by its expected score sum_s s * p(s) over the five digit logprobs
(renormalized), a signal that survives a teacher whose argmax is nearly constant. NDCG@k is computed
against the pairs' gold `relevance` (questions with at least one relevant pair); `labels`, the gold of
every pair that was sent (accepted or not), makes a rejected relevant document count as missed, as it would be for a student trained on the accepted pairs only. The input order
(a retriever's ranking, or the dataset's order of a question's own passages) is the reference.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from r3forge.annotate.judge import approvals
from r3forge.annotate.verbal import expected_score
from r3forge.metrics.ranking import ndcg_batch
from r3forge.synth.export import load_accepted
from r3forge.synth.faults import item_outcomes
from r3forge.synth.store import canonical_json, read_faults

K_VALUES = (1, 2, 3, 5)


def teacher_order(rows: list[dict]) -> list[str]:
    """Doc ids by score (high first), then score-token logprob (high first; missing last), then input rank.

    >>> teacher_order([{"doc_id": "a", "score": 3, "score_logprob": -0.1, "rank": 0},
    ...                {"doc_id": "b", "score": 5, "score_logprob": -2.0, "rank": 1},
    ...                {"doc_id": "c", "score": 5, "score_logprob": -0.5, "rank": 2}])
    ['c', 'b', 'a']
    """

    def key(r: dict) -> tuple:
        lp = r.get("score_logprob")
        return (-int(r["score"]), -(lp if lp is not None else -np.inf), r.get("rank") or 0)

    return [str(r["doc_id"]) for r in sorted(rows, key=key)]


def expected_order(rows: list[dict]) -> list[str]:
    """Doc ids by expected score (high first; the argmax score where a row has none), then input rank.

    >>> expected_order([{"doc_id": "a", "score": 1, "expected_score": 1.2, "rank": 0},
    ...                 {"doc_id": "b", "score": 1, "expected_score": 1.9, "rank": 1},
    ...                 {"doc_id": "c", "score": 2, "expected_score": None, "rank": 2}])
    ['c', 'b', 'a']
    """

    def key(r: dict) -> tuple:
        e = r.get("expected_score")
        return (-(e if e is not None else float(r["score"])), r.get("rank") or 0)

    return [str(r["doc_id"]) for r in sorted(rows, key=key)]


def agreement(
    rows: Iterable[Mapping[str, Any]],
    labels: Mapping[tuple[str, str], int | None] | None = None,
    k_values: Iterable[int] = K_VALUES,
) -> dict[str, Any]:
    """NDCG@k vs gold relevance of the teacher's ranking (argmax score, logprob tie-break), of its expected
    score where rows carry `expected_score` (`expected_ndcg@k`) and of the input order; mean score by label."""
    by_q: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_q[str(r["question_id"])].append(dict(r))
    qrels_of: dict[str, dict[str, int]] = defaultdict(dict)
    for (qid, did), rel in (labels or {}).items():
        if rel is not None:
            qrels_of[str(qid)][str(did)] = int(rel)
    for qid, rs in by_q.items():
        for r in rs:
            if r.get("relevance") is not None:
                qrels_of[qid].setdefault(str(r["doc_id"]), int(r["relevance"]))
    questions = [q for q in by_q if any(v > 0 for v in qrels_of[q].values())]
    out: dict[str, Any] = {"questions_with_gold": len(questions)}
    scores_by_label: dict[int, list[int]] = defaultdict(list)
    expected_by_label: dict[int, list[float]] = defaultdict(list)
    for q in by_q:
        for r in by_q[q]:
            if r.get("relevance") is not None:
                scores_by_label[int(r["relevance"])].append(int(r["score"]))
                if r.get("expected_score") is not None:
                    expected_by_label[int(r["relevance"])].append(float(r["expected_score"]))
    out["mean_score_by_relevance"] = {
        str(k): round(float(np.mean(v)), 3) for k, v in sorted(scores_by_label.items())
    }
    if expected_by_label:
        out["mean_expected_score_by_relevance"] = {
            str(k): round(float(np.mean(v)), 3) for k, v in sorted(expected_by_label.items())
        }
    if not questions:
        return out
    teacher = [teacher_order(by_q[q]) for q in questions]
    given = [[str(r["doc_id"]) for r in sorted(by_q[q], key=lambda r: r.get("rank") or 0)] for q in questions]
    qrels = [qrels_of[q] for q in questions]
    with_expected = any(r.get("expected_score") is not None for q in questions for r in by_q[q])
    expected = [expected_order(by_q[q]) for q in questions] if with_expected else []
    for k in k_values:
        out[f"ndcg@{k}"] = round(float(ndcg_batch(teacher, qrels, k).mean()), 4)
        if with_expected:
            out[f"expected_ndcg@{k}"] = round(float(ndcg_batch(expected, qrels, k).mean()), 4)
        out[f"input_order_ndcg@{k}"] = round(float(ndcg_batch(given, qrels, k).mean()), 4)
    return out


# what each count of a verbal annotation report counts (report.json's "counts")
PAIR_COUNTS = {
    "pairs_requested": "distinct (question, document) pairs of the job's input (without it, as in `annotate "
    "report`: the pairs with a record in the folder) = pairs_annotated + pairs_failed + pairs_not_sent",
    "pairs_annotated": "pairs the teacher answered = pairs_accepted + pairs_rejected",
    "pairs_accepted": "answers that passed the format and copy checks: the training data",
    "pairs_rejected": "answers the checks refused (by reason: reject_reasons); not training data",
    "pairs_failed": "pairs whose request the teacher server never answered usably, after every retry (by "
    "reason: failure_reasons); a rerun retries them",
    "pairs_not_sent": "pairs with no record yet (the run stopped before them); a rerun sends them",
    "acceptance_rate": "pairs_accepted / pairs_annotated",
    "faults": "the teacher server's calls over every run into the folder, killed runs included: attempts "
    "(HTTP calls made), retries by cause, timeouts, requests given up by reason (also those of pairs a "
    "later run annotated)",
}
# the same for a judge report
JUDGE_COUNTS = {
    "annotations_requested": "distinct annotations of the job's input = annotations_judged + "
    "annotations_rejected + annotations_failed + annotations_not_sent",
    "annotations_judged": "annotations the judge gave a verdict on",
    "annotations_approved": "of annotations_judged, those with the verdict yes",
    "annotations_rejected": "judge answers without a usable verdict (by reason: reject_reasons)",
    "annotations_failed": "annotations whose request the judge server never answered usably, after every "
    "retry (by reason: failure_reasons); a rerun retries them",
    "annotations_not_sent": "annotations with no record yet (the run stopped before them)",
    "approval_rate": "annotations_approved / annotations_judged",
    "faults": PAIR_COUNTS["faults"].replace("teacher", "judge"),
}


def outcome_counts(folder: str, requested: Iterable[dict] | None = None) -> dict[str, Any]:
    """How the items of a synthesis folder ended: requested, accepted, rejected, failed, not_sent (counts)
    and reject_reasons / failure_reasons, over the items whose `key()` is in `requested` (the job's input;
    None: every item with a record in the folder). requested = accepted + rejected + failed + not_sent."""
    ended = item_outcomes(folder)
    wanted = set(ended) if requested is None else {canonical_json(k) for k in requested}
    kinds, reasons = Counter(), {"rejected": Counter(), "failed": Counter()}
    for key in wanted & ended.keys():
        kind, reason = ended[key]
        kinds[kind] += 1
        reasons.get(kind, Counter())[reason] += 1
    done = kinds["accepted"] + kinds["rejected"] + kinds["failed"]
    return {
        "requested": len(wanted),
        **{kind: kinds[kind] for kind in ("accepted", "rejected", "failed")},
        "not_sent": len(wanted) - done,
        "reject_reasons": dict(reasons["rejected"].most_common()),
        "failure_reasons": dict(reasons["failed"].most_common()),
    }


def annotation_report(
    folder: str, labels: Mapping[tuple[str, str], int | None] | None = None
) -> dict[str, Any]:
    """Counts (each described in `counts`), reject and failure reasons, teacher faults, score distribution
    and `agreement` of a verbal annotation folder, over the pairs of `labels` (the job's: (question_id,
    doc_id) -> gold relevance), or over every pair of the folder without them."""
    requested = None if labels is None else [{"question_id": q, "doc_id": d} for q, d in labels]
    n = outcome_counts(folder, requested)
    accepted = load_accepted(folder)
    cols = ("question_id", "doc_id", "score", "score_logprob", "score_logprobs", "relevance", "rank")
    values = [accepted[c] if c in accepted.column_names else [None] * len(accepted) for c in cols]
    rows = [dict(zip(cols, v, strict=True)) for v in zip(*values, strict=True)]
    if labels is not None:
        rows = [r for r in rows if (r["question_id"], r["doc_id"]) in labels]
    for r in rows:  # the teacher's expected score from its five digit logprobs (None without top-k)
        r["expected_score"] = expected_score(r.pop("score_logprobs"))
    scores = Counter(int(r["score"]) for r in rows)
    annotated = n["accepted"] + n["rejected"]
    return {
        "folder": str(folder),
        "pairs_requested": n["requested"],
        "pairs_annotated": annotated,
        "pairs_accepted": n["accepted"],
        "pairs_rejected": n["rejected"],
        "pairs_failed": n["failed"],
        "pairs_not_sent": n["not_sent"],
        "acceptance_rate": round(n["accepted"] / annotated, 4) if annotated else None,
        "reject_reasons": n["reject_reasons"],
        "failure_reasons": n["failure_reasons"],
        "faults": read_faults(folder),
        "counts": PAIR_COUNTS,
        "score_distribution": {str(s): scores.get(s, 0) for s in range(1, 6)},
        **agreement(rows, labels),
    }


def judge_report(folder: str, requested: Iterable[dict]) -> dict[str, Any]:
    """Counts (each described in `counts`), approval rate and judge faults of a judge folder over the
    annotations of `requested` (the judge step's `key()` of each item: {"annotation_key": ...})."""
    requested = list(requested)
    n = outcome_counts(folder, requested)
    wanted = {k["annotation_key"] for k in requested}
    verdicts = [v for key, v in approvals(folder).items() if key in wanted]
    approved = sum(verdicts)
    return {
        "annotations_requested": n["requested"],
        "annotations_judged": n["accepted"],
        "annotations_approved": approved,
        "annotations_rejected": n["rejected"],
        "annotations_failed": n["failed"],
        "annotations_not_sent": n["not_sent"],
        "approval_rate": round(approved / len(verdicts), 4) if verdicts else None,
        "reject_reasons": n["reject_reasons"],
        "failure_reasons": n["failure_reasons"],
        "faults": read_faults(folder),
        "counts": JUDGE_COUNTS,
    }


def format_report(report: Mapping[str, Any]) -> str:
    """One `name: value` line per figure (not the `counts` descriptions)."""
    items = [(k, v) for k, v in report.items() if k != "counts"]
    lines = [f"{k}: {json.dumps(v) if isinstance(v, dict) else v}" for k, v in items]
    return "\n".join(lines)


def write_report(report: Mapping[str, Any], folder: str) -> Path:
    path = Path(folder) / "report.json"
    path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return path
