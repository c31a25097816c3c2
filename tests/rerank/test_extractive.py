"""The extractive stand-in reranker: scores by the share of query stems a passage covers, quotes the passage's
best-matching sentence (the first of the best), and never needs an answer."""

from __future__ import annotations

import pytest

from r3forge.rerank import Candidate, order
from r3forge.rerank.extractive import ExtractiveVerbalReranker, score_passage

QUERY = "In which city is Piris Trading Company headquartered?"
ANSWERING = Candidate("a", "Piris Trading Company", "It was founded in 1902. Piris Trading Company is "
                      "headquartered in Laebrith. Its trade is in grain.")  # fmt: skip
NEAR = Candidate("b", "Greidren Trading Company", "Greidren Trading Company is headquartered in Ostmark.")
OFF = Candidate("c", "Rowaeria", "Rowaeria lies in Nusora.")


def test_scores_order_and_comments():
    out = ExtractiveVerbalReranker().rerank([QUERY], [[OFF, NEAR, ANSWERING]])[0]
    assert out.scores == [1.0, 3.0, 4.0]  # 0, 3 and 4 of the stems city, piris, tradi, compa, headq
    assert order(out) == [2, 1, 0]
    assert out.notes[2] == ('It states that "Piris Trading Company is headquartered in Laebrith", '
                            "which bears on the question.")  # fmt: skip
    assert out.notes[0] == "It is about Rowaeria, which the question does not concern."
    assert out.tiebreak == [0.0, 3.0, 4.0]  # stems the quoted sentence shares
    assert "only touches" in out.notes[1]


def test_the_first_of_equally_matching_sentences_is_quoted_and_ties_keep_retriever_order():
    twin = Candidate(
        "d", "Piris Trading Company", "Piris Trading Company is old. Piris Trading Company is big."
    )
    score, shared, note = score_passage(QUERY, twin)
    assert (score, shared) == (3.0, 3.0) and '"Piris Trading Company is old"' in note
    out = ExtractiveVerbalReranker().rerank([QUERY], [[twin, twin]])[0]
    assert order(out) == [0, 1]


def test_a_query_without_content_words_scores_everything_1():
    out = ExtractiveVerbalReranker().rerank(["Who is it?"], [[ANSWERING, OFF]])[0]
    assert out.scores == [1.0, 1.0] and all("does not concern" in n for n in out.notes)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"ExtractiveVerbalReranker\.rerank: 2 questions but 1"):
        ExtractiveVerbalReranker().rerank([QUERY, QUERY], [[ANSWERING]])
