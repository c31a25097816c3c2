"""The reranker protocol's shared pieces: ordering with tie-breaks, passage text, input checks, and the
no-op reranker that keeps the retriever's order."""

from __future__ import annotations

import math

import pytest

from r3forge.rerank import Candidate, Reranker, RerankOutput, RetrieverOrder, order, passage, to_candidates
from r3forge.rerank.base import check_inputs, flat_pairs, split_flat

DOCS = [Candidate("a", "A", "x"), Candidate("b", "B", "y"), Candidate("c", "", "z")]


def test_order_score_then_tiebreak_then_index() -> None:
    assert order(RerankOutput([2.0, 2.0, 5.0, 2.0])) == [2, 0, 1, 3]  # stable for ties
    out = RerankOutput([3.0, 3.0, 3.0, 1.0], tiebreak=[math.nan, -0.5, -0.1, 9.0])
    assert order(out) == [2, 1, 0, 3]  # NaN tiebreak last among equal scores
    with_none = RerankOutput([1.0, 1.0], tiebreak=[None, -3.0])  # type: ignore[list-item]
    assert order(with_none) == [1, 0]
    assert order(RerankOutput([math.nan, 0.0])) == [1, 0]  # a NaN score ranks last
    assert order(RerankOutput([])) == []
    with pytest.raises(ValueError, match="2 tiebreak values for 3 scores"):
        order(RerankOutput([1.0, 2.0, 3.0], tiebreak=[0.0, 0.0]))


def test_passage_and_candidates() -> None:
    assert passage(DOCS[0]) == '"A"\nx' and passage(DOCS[2]) == "z"
    cands = to_candidates([{"id": "p", "title": None, "text": "t"}, {"id": 3, "title": "T", "text": "u",
                                                                     "relevance": 1}])  # fmt: skip
    assert cands == [Candidate("p", "", "t", -1), Candidate("3", "T", "u", 1)]


def test_flat_pairs_roundtrip() -> None:
    cands = [DOCS[:2], [], DOCS]
    pairs = flat_pairs(["q1", "q2", "q3"], cands)
    assert [q for q, _ in pairs] == ["q1", "q1", "q3", "q3", "q3"]
    assert split_flat([c.id for _, c in pairs], cands) == [["a", "b"], [], ["a", "b", "c"]]
    with pytest.raises(ValueError, match="4 values for 5"):
        split_flat([1, 2, 3, 4], cands)


def test_retriever_order_and_input_errors() -> None:
    reranker = RetrieverOrder()
    assert isinstance(reranker, Reranker) and reranker.name == "none"
    outs = reranker.rerank(["q1", "q2"], [DOCS, DOCS[:1]])
    assert [order(o) for o in outs] == [[0, 1, 2], [0]]
    with pytest.raises(ValueError, match=r"RetrieverOrder\.rerank: 2 questions but 1 candidate lists"):
        reranker.rerank(["q1", "q2"], [DOCS])
    with pytest.raises(ValueError, match=r"candidates\[0\]\[1\] must be a Candidate, got dict"):
        check_inputs(["q"], [[DOCS[0], {"id": "x"}]], "X")  # type: ignore[list-item]
    with pytest.raises(ValueError, match="not a single string"):
        check_inputs("q", [DOCS], "X")  # type: ignore[arg-type]
