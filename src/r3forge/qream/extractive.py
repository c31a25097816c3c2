"""An offline question-oriented teacher for QREAM (a named option, not the paper's LLM rewriter): the
sentences of r_raw that bear on the question, assembled into one document.

    extractive_rewrite("Who built the Eiffel Tower?", raw, sentences=2)

Each sentence of r_raw is scored by the question's content tokens it contains (and that its paragraph's title
contains), each weighted by its inverse frequency over r_raw's sentences (a rare question word such as a name
counts more than a common one). The `sentences` best are kept in r_raw's order, grouped under their
paragraph's title. `annotate qream --rewriter extractive` makes round n's candidate from the best 2n
sentences, then puts every candidate through the same reader, fact extractor, judge and golden selection as
the LLM rewriter's: the teacher proposes, the dual criteria decide.
"""

from __future__ import annotations

import math

from r3forge.qream.rewrite import rewrite_item
from r3forge.text import complete_sentences, content_words


def raw_sentences(raw: str) -> list[tuple[str, str]]:
    """(title, sentence) pairs of an r_raw made by `raw_retrieval` ("title: text" paragraphs).

    >>> raw_sentences("Eiffel Tower: It is in Paris. It is tall.\\n\\nNo title here.")
    [('Eiffel Tower', 'It is in Paris.'), ('Eiffel Tower', 'It is tall.'), ('', 'No title here.')]
    """
    pairs = []
    for paragraph in raw.split("\n\n"):
        title, sep, text = paragraph.partition(": ")
        if not sep or len(title.split()) > 12:  # no title prefix: the paragraph is all text
            title, text = "", paragraph
        text = " ".join(text.split())
        found = complete_sentences(text) or ([text] if text else [])
        pairs += [(title.strip(), s) for s in found]
    return pairs


def extractive_rewrite(question: str, raw: str, sentences: int) -> str:
    """The `sentences` sentences of r_raw that share the most (idf-weighted) question tokens, in r_raw order,
    as "title: s1 s2" paragraphs. Sentences without a question token are never kept; "" when none has one.

    >>> raw = "Eiffel Tower: It was built by Gustave Eiffel. It is tall.\\n\\nRome: Rome is old."
    >>> extractive_rewrite("Who built the Eiffel Tower?", raw, 1)
    'Eiffel Tower: It was built by Gustave Eiffel.'
    >>> extractive_rewrite("Who built the Eiffel Tower?", raw, 3)
    'Eiffel Tower: It was built by Gustave Eiffel. It is tall.'
    """
    pairs = raw_sentences(raw)

    def words(text: str) -> set[str]:
        return set(content_words(text))

    query = words(question)
    bags = [words(title) | words(s) for title, s in pairs]
    idf = {t: math.log(1 + len(bags) / (1 + sum(t in b for b in bags))) for t in query}
    own = [words(s) for _, s in pairs]
    scores = [
        sum(idf[t] for t in query & bag) + 0.5 * sum(idf[t] for t in query & o)
        for bag, o in zip(bags, own, strict=True)
    ]
    ranked = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))
    kept = sorted(ranked[:sentences])
    paragraphs: list[tuple[str, list[str]]] = []
    for i in kept:
        title, sentence = pairs[i]
        if paragraphs and paragraphs[-1][0] == title:
            paragraphs[-1][1].append(sentence)
        else:
            paragraphs.append((title, [sentence]))
    return "\n\n".join(f"{t}: {' '.join(ss)}" if t else " ".join(ss) for t, ss in paragraphs)


def extractive_candidates(targets: list[dict], raw: dict[str, str], rounds: int) -> list[dict]:
    """Candidate items (as `pipeline.generate_candidates` makes them) of the extractive teacher: round n is
    the best 2n sentences; a round whose document equals an earlier round's (r_raw ran out) is skipped."""
    candidates = []
    for record in targets:
        qid = str(record["id"])
        seen: set[str] = set()
        for n in range(1, rounds + 1):
            document = extractive_rewrite(record["question"], raw[qid], 2 * n)
            if document and document not in seen:
                seen.add(document)
                item = rewrite_item(record, raw[qid], n)
                del item["source"]
                candidates.append(item | {"raw": raw[qid], "document": document})
    return candidates
