"""Answer-quality metrics: SQuAD v1.1 exact match and token F1, and answer-in-text cover (RA-R).

Normalization and scoring follow the official SQuAD v1.1 evaluation script (``evaluate-v1.1.py``):
lowercase, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace; EM and F1 are the
maximum over the gold answers.

Answers that normalize to the empty string (``""``, ``"The"``, ``"?!"``) follow the official v1.1 script:

- EM compares normalized strings, so an empty prediction matches an empty-normalizing gold (EM = 1).
- F1 is 0 whenever the two sides share no token, which includes the case where both are empty
  (the SQuAD v2.0 script, and torchmetrics, score that case 1 instead).
- ``answer_in_text`` never counts an empty-normalizing answer as covered: it names no evidence.

The batched functions return numpy arrays and normalize each gold answer once per example.
"""

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

_PUNCT_TABLE = str.maketrans("", "", string.punctuation)
_ANSWER_PREFIX = re.compile(r"^[\s*_#>`]*(?:final\s+)?answer[\s*_]*:[\s*_]*", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")

Golds = str | Sequence[str]


def short_answer(text: str) -> str:
    """A generated answer as it is scored: the first non-empty line, without an "Answer:" prefix (markdown
    emphasis allowed) or trailing period/emphasis; "" when there is no text.

    >>> short_answer("**Answer:** Paris.\\nIt is the capital.")
    'Paris'
    """
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return _ANSWER_PREFIX.sub("", lines[0]).strip(" *_.") if lines else ""


def normalize_answer(s: str) -> str:
    """Normalize an answer as SQuAD v1.1 does: lowercase, strip punctuation and articles, collapse spaces.

    >>> normalize_answer("The  Eiffel-Tower!")
    'eiffeltower'
    >>> normalize_answer("an apple a day")
    'apple day'
    >>> normalize_answer("The")
    ''
    """
    s = s.lower().translate(_PUNCT_TABLE)
    return " ".join(_ARTICLES.sub(" ", s).split())


def _as_golds(golds: Golds, where: str) -> list[str]:
    golds = [golds] if isinstance(golds, str) else list(golds)
    if not golds:
        raise ValueError(f"{where}: empty list of gold answers")
    return golds


def _f1_tokens(pred: list[str], gold: list[str], gold_counts: Counter) -> float:
    num_same = sum((Counter(pred) & gold_counts).values())
    if num_same == 0:
        return 0.0
    precision, recall = num_same / len(pred), num_same / len(gold)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, golds: Golds) -> float:
    """SQuAD v1.1 exact match of ``prediction`` against one gold answer or a list of them (max over golds).

    Raises ValueError when ``golds`` is an empty list.

    >>> exact_match("the Beatles.", ["Beatles", "John Lennon"])
    1.0
    >>> exact_match("Beatles band", "The Beatles")
    0.0
    """
    return float(exact_match_batch([prediction], [golds])[0])


def f1_score(prediction: str, golds: Golds) -> float:
    """SQuAD v1.1 token F1 of ``prediction`` against one gold answer or a list of them (max over golds).

    Raises ValueError when ``golds`` is an empty list.

    >>> f1_score("the Beatles band", ["Beatles"])
    0.6666666666666666
    >>> f1_score("", ["the"])  # no shared token: 0, as in the official v1.1 script
    0.0
    """
    return float(f1_batch([prediction], [golds])[0])


def exact_match_batch(predictions: Sequence[str], golds_list: Sequence[Golds]) -> np.ndarray:
    """Exact match per example, float64 array of 0/1; ``golds_list[i]`` holds the gold answers of example i.

    >>> exact_match_batch(["Paris", "london"], [["paris"], ["Berlin", "London!"]])
    array([1., 1.])
    """
    _check_lengths(predictions, golds_list, "predictions and golds_list")
    out = np.zeros(len(predictions), dtype=np.float64)
    for i, (pred, golds) in enumerate(zip(predictions, golds_list, strict=True)):
        gold_norms = {normalize_answer(g) for g in _as_golds(golds, f"golds_list[{i}]")}
        out[i] = normalize_answer(pred) in gold_norms
    return out


def f1_batch(predictions: Sequence[str], golds_list: Sequence[Golds]) -> np.ndarray:
    """Token F1 per example (max over that example's golds), float64 array.

    >>> f1_batch(["Paris France", "nothing"], [["Paris"], ["London"]])
    array([0.66666667, 0.        ])
    """
    _check_lengths(predictions, golds_list, "predictions and golds_list")
    out = np.zeros(len(predictions), dtype=np.float64)
    for i, (pred, golds) in enumerate(zip(predictions, golds_list, strict=True)):
        gold_tokens = [normalize_answer(g).split() for g in _as_golds(golds, f"golds_list[{i}]")]
        pred_tokens = normalize_answer(pred).split()
        if not pred_tokens:
            continue  # no token to share with any gold: F1 = 0
        out[i] = max(_f1_tokens(pred_tokens, gold, Counter(gold)) for gold in gold_tokens)
    return out


def answer_in_text(answers: Golds, text: str | Sequence[str]) -> bool:
    """Whether any gold answer appears, after normalization, as a whole-token span of ``text``.

    ``text`` may be one string or a list of observation strings (covered if any one contains the answer).
    Answers that normalize to ``""`` never cover. Raises ValueError for an empty answer list.

    >>> answer_in_text(["Barack Obama"], "In 2009, barack obama became president.")
    True
    >>> answer_in_text("Obama", "Obamacare passed in 2010.")  # token boundary: no partial-word match
    False
    >>> answer_in_text(["1969"], ["Apollo 11 landed", "in July 1969."])
    True
    """
    return bool(cover_batch([answers], [text])[0])


def cover_batch(answers_list: Sequence[Golds], texts_list: Sequence[str | Sequence[str]]) -> np.ndarray:
    """Answer cover (RA-R) per example, bool array: does any gold of example i appear in ``texts_list[i]``.

    Each ``texts_list[i]`` is one string or a list of observation strings.

    >>> cover_batch([["Paris"], ["Rome", "the Eternal City"]], ["I love paris.", ["Milan is big", "Roma"]])
    array([ True, False])
    """
    _check_lengths(answers_list, texts_list, "answers_list and texts_list")
    out = np.zeros(len(answers_list), dtype=bool)
    for i, (answers, texts) in enumerate(zip(answers_list, texts_list, strict=True)):
        needles = [normalize_answer(a) for a in _as_golds(answers, f"answers_list[{i}]")]
        needles = [f" {n} " for n in needles if n]
        if not needles:
            continue
        texts = [texts] if isinstance(texts, str) else texts
        hay = [f" {normalize_answer(t)} " for t in texts]
        out[i] = any(n in h for h in hay for n in needles)
    return out


def _check_lengths(a: Sequence, b: Sequence, names: str) -> None:
    if len(a) != len(b):
        raise ValueError(f"length mismatch between {names}: {len(a)} vs {len(b)}")


_QUOTED = re.compile(r'"([^"]+)"|\u201c([^\u201d]+)\u201d')


def quoted_spans(text: str) -> list[str]:
    """The spans a comment quotes (between straight or curly double quotes), whitespace collapsed, a trailing
    ``...`` (a quote cut short) dropped.

    >>> quoted_spans('It states that "Ann was born   in Rome", and \u201cBob ...\u201d.')
    ['Ann was born in Rome', 'Bob']
    """
    spans = (" ".join((a or b).split()).removesuffix("...").strip() for a, b in _QUOTED.findall(text))
    return [s for s in spans if s]


def quotes_found(text: str, passage: str) -> tuple[int, int]:
    """(quoted spans in ``text``, of them found verbatim in ``passage``): quote faithfulness counts. Verbatim
    means the same characters, case included, up to whitespace and a final period of the span.

    >>> quotes_found('It states that "Ann was born in Rome." and "Bob is 3"', "Ann  was born in Rome. Bob is 4.")
    (2, 1)
    """
    hay = " ".join(passage.split())
    spans = quoted_spans(text)
    return len(spans), sum(s.rstrip(".") in hay for s in spans)
