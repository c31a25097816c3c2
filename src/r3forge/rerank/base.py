"""What every reranker shares: `Candidate`, `RerankOutput`, the `Reranker` protocol and `order`.

A reranker scores the candidate passages of each question (higher = more relevant, in candidate order);
`order` turns that into candidate indices best first. Every implementation batches all (question,
candidate) pairs of a call together, so one call per evaluation batch is the efficient way to use it:

    reranker = BiEncoderReranker.from_config(BiEncoderConfig())
    outs = reranker.rerank(["Who wrote Hamlet?"], [[Candidate("p1", "Tulip", "A flower."),
                                                   Candidate("p2", "Hamlet", "A play by Shakespeare.")]])
    order(outs[0])   # [1, 0]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from r3forge.retrieval.base import passage_text


@dataclass(frozen=True)
class Candidate:
    """One passage to rerank for a question."""

    id: str
    title: str
    text: str
    relevance: int = -1  # graded gold relevance (see `r3forge.data.records`), -1 unknown


@dataclass
class RerankOutput:
    """One question's scores, all lists aligned with its candidates ([N] each)."""

    scores: list[float]  # [N] higher = more relevant
    tiebreak: list[float] | None = None  # [N] secondary key, higher first (NaN: none for that candidate)
    notes: list[str | None] | None = None  # [N] free text per candidate (verbal: the comment)
    extra: dict[str, Any] = field(default_factory=dict)  # per-question details worth logging


@runtime_checkable
class Reranker(Protocol):
    """Anything that scores candidates: one `RerankOutput` per question, batched across all questions."""

    name: str

    def rerank(
        self, questions: Sequence[str], candidates: Sequence[Sequence[Candidate]]
    ) -> list[RerankOutput]: ...


def _missing(x: float | None) -> bool:
    return x is None or math.isnan(x)


def order(out: RerankOutput) -> list[int]:
    """Candidate indices best first: score desc, then tiebreak desc (None/NaN last), then original index.

    >>> order(RerankOutput([1.0, 3.0, 3.0, 2.0], tiebreak=[0.0, -2.0, -1.0, float("nan")]))
    [2, 1, 3, 0]
    >>> order(RerankOutput([0.0, 0.0, float("nan")]))
    [0, 1, 2]
    """
    n = len(out.scores)
    if out.tiebreak is not None and len(out.tiebreak) != n:
        raise ValueError(f"RerankOutput: {len(out.tiebreak)} tiebreak values for {n} scores")
    tiebreak = out.tiebreak if out.tiebreak is not None else [None] * n

    def key(i: int) -> tuple:
        s, t = out.scores[i], tiebreak[i]
        return (_missing(s), 0.0 if _missing(s) else -s, _missing(t), 0.0 if _missing(t) else -t, i)

    return sorted(range(n), key=key)


def passage(c: Candidate) -> str:
    """The text a model reads for a candidate: FlashRAG `contents` ('"Title"\\ntext'), as dense indexes do.

    >>> passage(Candidate("p1", "Paris", "The capital of France."))
    '"Paris"\\nThe capital of France.'
    >>> passage(Candidate("p2", "", "No title."))
    'No title.'
    """
    return passage_text(c.title, c.text)


def to_candidates(passages: Iterable[Mapping[str, Any]]) -> list[Candidate]:
    """Candidates from passage dicts {id, title, text[, relevance]} (a QA record's `passages`, a retriever's
    `get`).

    >>> to_candidates([{"id": 7, "title": "T", "text": "x", "relevance": 2}])
    [Candidate(id='7', title='T', text='x', relevance=2)]
    """
    return [
        Candidate(str(p["id"]), str(p.get("title") or ""), str(p["text"]), int(p.get("relevance", -1)))
        for p in passages
    ]


def check_inputs(questions: Sequence[str], candidates: Sequence[Sequence[Candidate]], owner: str) -> None:
    """Raise ValueError naming `owner` unless there is one list of `Candidate`s per question (a string)."""
    if isinstance(questions, str) or isinstance(candidates, str):
        raise ValueError(f"{owner}.rerank: questions and candidates must be lists, not a single string")
    if len(questions) != len(candidates):
        raise ValueError(f"{owner}.rerank: {len(questions)} questions but {len(candidates)} candidate lists")
    for i, (q, docs) in enumerate(zip(questions, candidates, strict=True)):
        if not isinstance(q, str):
            raise ValueError(f"{owner}.rerank: questions[{i}] must be a string, got {type(q).__name__}")
        bad = next((j for j, c in enumerate(docs) if not isinstance(c, Candidate)), None)
        if bad is not None:
            got = type(docs[bad]).__name__
            raise ValueError(f"{owner}.rerank: candidates[{i}][{bad}] must be a Candidate, got {got}")


def flat_pairs(
    questions: Sequence[str], candidates: Sequence[Sequence[Candidate]]
) -> list[tuple[str, Candidate]]:
    """Every (question, candidate) pair, question-major (the order `split_flat` undoes).

    >>> len(flat_pairs(["a", "b"], [[Candidate("1", "", "x")], []]))
    1
    """
    return [(q, c) for q, docs in zip(questions, candidates, strict=True) for c in docs]


def split_flat(values: Sequence[Any], candidates: Sequence[Sequence[Candidate]]) -> list[list[Any]]:
    """Flat per-pair values back into one list per question.

    >>> split_flat([1, 2, 3], [[Candidate("a", "", "")] * 2, [], [Candidate("b", "", "")]])
    [[1, 2], [], [3]]
    """
    if len(values) != sum(len(docs) for docs in candidates):
        raise ValueError(f"{len(values)} values for {sum(len(d) for d in candidates)} (question, doc) pairs")
    out, start = [], 0
    for docs in candidates:
        out.append(list(values[start : start + len(docs)]))
        start += len(docs)
    return out


class RetrieverOrder:
    """No reranking: keeps the retriever's order (scores = -index).

    >>> RetrieverOrder().rerank(["q"], [[Candidate("a", "", "x"), Candidate("b", "", "y")]])[0].scores
    [-0.0, -1.0]
    """

    name = "none"

    def rerank(
        self, questions: Sequence[str], candidates: Sequence[Sequence[Candidate]]
    ) -> list[RerankOutput]:
        check_inputs(questions, candidates, "RetrieverOrder")
        return [RerankOutput([-float(i) for i in range(len(docs))]) for docs in candidates]
