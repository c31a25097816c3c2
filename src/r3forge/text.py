"""English text helpers for the rankers and teachers that work on words: sentences, stop words, content words,
quoting. Used by the rule teacher (`annotate/rules.py`), the extractive verbal reranker (`rerank/extractive.py`),
QREAM's extractive rewriter, fact scoring and judge probe (`qream/`).

Two sentence splitters, for two kinds of text:
- `sentences`: a *passage* (a corpus paragraph, a HotpotQA context) split where a sentence-ending mark is
  followed by space and a capital, digit, quote or parenthesis; an unterminated last sentence is kept.
- `complete_sentences`: a *generation* (a rewrite, a list of facts) cut into sentences that end in . ! ? before
  space or the end: "2.1 million" and "e.g.," stay inside one, and an unfinished tail (a generation that hit
  max_tokens) is not a sentence.

BM25 (`retrieval/bm25.py`) does not use these words: an index tokenizes with bm25s's per-language stop-word
lists (its `stopwords` config key), so an index built elsewhere with bm25s tokenizes the same.
"""

from __future__ import annotations

import re

from r3forge.metrics.qa import normalize_answer

# carry no fact: dropped before words are matched (articles go in SQuAD normalization already)
_FUNCTION_WORDS_TEXT = (
    "is are was were be been being am of in on at to for from by with and or but as that this these those it its "
    "he she they his her their them which who whom whose also has have had not no there than then into about "
    "after before over under during while"
)
FUNCTION_WORDS = frozenset(_FUNCTION_WORDS_TEXT.split())
# what a question asks with, not what it is about
_QUESTION_WORDS_TEXT = "who whom what when where which why how did does do many much"
QUESTION_WORDS = frozenset(_QUESTION_WORDS_TEXT.split())
STOPWORDS = FUNCTION_WORDS | QUESTION_WORDS

_PASSAGE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
# a sentence ends at . ! ? before whitespace or the end
COMPLETE_SENTENCE = re.compile(r"(?:[^.!?]|[.!?](?!\s|$))+[.!?]+(?=\s|$)")


def sentences(text: str) -> list[str]:
    """A passage split into sentences (HotpotQA passages are their sentences joined).

    >>> sentences("Paris is big. It is in France. 3 km wide")
    ['Paris is big.', 'It is in France.', '3 km wide']
    """
    return [s.strip() for s in _PASSAGE_BREAK.split(text.strip()) if s.strip()]


def complete_sentences(text: str) -> list[str]:
    """The finished sentences of a generation, whitespace collapsed: an unterminated tail is left out.

    >>> complete_sentences("It has 2.1 million people.  It is\\nold! It was")
    ['It has 2.1 million people.', 'It is old!']
    """
    return [m.group().strip() for m in COMPLETE_SENTENCE.finditer(" ".join(text.split()))]


def content_words(text: str, min_chars: int = 1) -> list[str]:
    """The SQuAD-normalized words of a text that are not stop words, in order, each of >= `min_chars` characters
    (3 where short tokens would match by accident; 1 where numbers such as "12" carry the fact).

    >>> content_words("Where was the Louvre built in 12 years?")
    ['louvre', 'built', '12', 'years']
    >>> content_words("Where was the Louvre built in 12 years?", min_chars=3)
    ['louvre', 'built', 'years']
    """
    return [t for t in normalize_answer(text).split() if t not in STOPWORDS and len(t) >= min_chars]


def quote(sentence: str, words: int = 30) -> str:
    """A sentence as a comment quotes it: no final period, cut to `words` words.

    >>> quote("It is a museum in Paris.", 3)
    'It is a ...'
    """
    tokens = sentence.rstrip(".").split()
    return " ".join(tokens[:words]) + (" ..." if len(tokens) > words else "")
