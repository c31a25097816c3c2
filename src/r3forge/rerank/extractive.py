"""An offline, answer-blind verbal reranker: a named stand-in for a strong teacher's evidence-keeping comments.

A verbal observation shows the reranker's comments instead of the passages, so an agent reading it can only
learn if the comments keep the evidence. The 135M student the quickstart distils mostly does not (its comments
say "which the question does not concern" of the very passage that answers), so the GRPO learning experiment
of `observation: verbal` needs an observer that keeps evidence where no strong teacher runs. This is it, and
it is *not* a model: per (query, passage) it quotes the passage's sentence that shares the most content-word
stems with the query, and scores 1-5 by the share of the query's stems the passage (title + text) covers:

    score = 1 + round(4 * covered / query stems)         5: every query word is there; 1: none
    comment (score >= 2)  It states that "<best sentence>", which {bears on | only touches} the question.
    comment (score 1)     It is about <title>, which the question does not concern.
    (a passage whose query words are all in its title, none in a sentence, is scored 1 as well)

It never sees a gold answer (unlike `annotate rules`, which labels from gold evidence for SFT). Select it
with `--reranker_backend extractive` (agent env) or `--methods extractive` (`eval rag`, a lexical baseline);
reports name it "extractive stand-in".

>>> out = ExtractiveVerbalReranker().rerank(
...     ["Where does Fucor Academy have its headquarters?"],
...     [[Candidate("a", "Cobral Academy", "Cobral Academy is in Nusora."),
...       Candidate("b", "Fucor Academy", "It was founded in 1846. Fucor Academy is headquartered in Kristouholm.")]])[0]
>>> out.scores
[2.0, 5.0]
>>> out.notes[1]
'It states that "Fucor Academy is headquartered in Kristouholm", which bears on the question.'
"""

from __future__ import annotations

from collections.abc import Sequence

from r3forge.rerank.base import Candidate, RerankOutput, check_inputs
from r3forge.text import content_words, quote, sentences

# in `eval rag`'s fingerprint of saved scores: bump when the rule changes
EXTRACTIVE_VERSION = "extractive_v2"  # v2: r3forge.text's stop words
STEM = 5  # characters a content word is cut to, so "headquarters" meets "headquartered"


def stems(text: str) -> set[str]:
    """The content-word stems of a text.

    >>> sorted(stems("Where is the Fucor Academy headquartered?"))
    ['acade', 'fucor', 'headq']
    """
    return {w[:STEM] for w in content_words(text, min_chars=3)}


def score_passage(query: str, c: Candidate) -> tuple[float, float, str]:
    """(score 1-5, tiebreak: the quoted sentence's shared stems, comment) of one (query, passage)."""
    asked = stems(query)
    covered = len(asked & stems(f"{c.title} {c.text}"))
    score = float(1 + round(4 * covered / len(asked))) if asked else 1.0
    split = sentences(c.text) or [c.text]
    shared = [len(asked & stems(s)) for s in split]
    best = max(range(len(split)), key=lambda i: (shared[i], -i))  # first of the best
    if score < 2 or not shared[best]:
        return 1.0, 0.0, f"It is about {c.title or 'something else'}, which the question does not concern."
    how = "bears on" if score >= 4 else "only touches"
    return score, float(shared[best]), f'It states that "{quote(split[best])}", which {how} the question.'


class ExtractiveVerbalReranker:
    """Lexical comment + 1-5 score per passage, in the verbal reranker's output shape (see module doc)."""

    name = "extractive"

    def rerank(
        self, questions: Sequence[str], candidates: Sequence[Sequence[Candidate]]
    ) -> list[RerankOutput]:
        check_inputs(questions, candidates, "ExtractiveVerbalReranker")
        outs = []
        for query, docs in zip(questions, candidates, strict=True):
            judged = [score_passage(query, c) for c in docs]
            outs.append(RerankOutput([j[0] for j in judged], [j[1] for j in judged], [j[2] for j in judged]))
        return outs
