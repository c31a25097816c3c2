"""EM / F1 / cover against torchmetrics' implementation of the official SQuAD v1.1 evaluation logic."""

import doctest
import random

import numpy as np
import pytest
from torchmetrics.functional.text.squad import _normalize_text as ref_normalize
from torchmetrics.functional.text.squad import squad as ref_squad

from r3forge.metrics import qa
from r3forge.metrics.qa import (
    answer_in_text,
    cover_batch,
    exact_match,
    exact_match_batch,
    f1_batch,
    f1_score,
    normalize_answer,
)

ANSWERS = [
    "Denver Broncos",
    "Saint Bernadette Soubirous",
    "the Eiffel Tower",
    "1976",
    "$3.5 million",
    "U.S. Army",
    "Marie Curie",
    "Beyoncé Knowles",
    "a copper statue of Christ",
    "New York City",
    "rock 'n' roll",
    "left-handed",
    "50%",
    "The Great Depression",
    "an apple a day",
    "J. R. R. Tolkien",
    "Ph.D.",
    "Queen Elizabeth II",
    "the",
    "gold, silver and bronze",
    "Nov. 5, 1605",
    "Apollo 11",
    "the Theory of Relativity",
    "Anne of Green Gables",
    "A.D. 79",
    "São Paulo",
    "thermodynamics",
]
FILLER = ["it", "was", "probably", "the", "an", "answer", "is", "Paris", "of", "a", "year", "team"]


def _perturb(rng: random.Random, answer: str) -> str:
    words = answer.split()
    op = rng.randrange(12)
    if op == 0:
        return answer.upper()
    if op == 1:
        return answer.lower() + rng.choice([".", "!", "?", ",", "'"])
    if op == 2:
        return rng.choice(["the ", "a ", "An ", "THE "]) + answer
    if op == 3:
        return " ".join(rng.sample(FILLER, rng.randint(1, 3))) + " " + answer
    if op == 4:
        return answer + " " + " ".join(rng.sample(FILLER, rng.randint(1, 3)))
    if op == 5 and len(words) > 1:
        words.pop(rng.randrange(len(words)))
        return " ".join(words)
    if op == 6:
        rng.shuffle(words)
        return "  ".join(words)
    if op == 7:
        return rng.choice(ANSWERS)
    if op == 8:
        return rng.choice(["", " ", "the", "?!", "A"])
    if op == 9:
        return " ".join(words + words[: rng.randint(1, len(words))])
    if op == 10:
        return f'"{answer}"\t({rng.choice(FILLER)})'
    return answer


def _cases(n: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        base = rng.choice(ANSWERS)
        golds = [base] + [_perturb(rng, base) for _ in range(rng.randint(0, 2))]
        cases.append((_perturb(rng, base), golds))
    return cases


def _reference(pred: str, golds: list[str]) -> tuple[float, float]:
    out = ref_squad([{"prediction_text": pred, "id": "q"}], [{"answers": {"text": golds}, "id": "q"}])
    return float(out["exact_match"]) / 100, float(out["f1"]) / 100


def test_normalize_matches_official():
    strings = ANSWERS + [_perturb(random.Random(i), a) for i, a in enumerate(ANSWERS * 8)]
    for s in strings:
        assert normalize_answer(s) == ref_normalize(s), s


def test_em_f1_match_official_on_generated_cases():
    cases = _cases(600)
    preds, golds_list = [p for p, _ in cases], [g for _, g in cases]
    em, f1 = exact_match_batch(preds, golds_list), f1_batch(preds, golds_list)
    assert em.shape == f1.shape == (600,) and em.dtype == f1.dtype == np.float64
    n_partial = n_both_empty = 0
    for i, (pred, golds) in enumerate(cases):
        ref_em, ref_f1 = _reference(pred, golds)
        assert em[i] == ref_em, (pred, golds)
        both_empty = not normalize_answer(pred) and any(not normalize_answer(g) for g in golds)
        if both_empty:
            # Documented difference: official v1.1 gives F1 = 0 (no shared token); torchmetrics follows v2.0.
            n_both_empty += 1
            assert ref_f1 == 1.0
            ref_f1 = max((_reference(pred, [g])[1] for g in golds if normalize_answer(g)), default=0.0)
        # 2PR / (P + R) of the same integer counts, in float64 in another order: ~1e-16 apart; a token
        # counted once too often moves F1 by > 1e-2
        assert f1[i] == pytest.approx(ref_f1, abs=1e-6), (pred, golds)
        n_partial += 0 < f1[i] < 1
    assert n_partial > 100 and n_both_empty > 0  # the generator exercises partial overlap and empty cases
    assert 0.1 < em.mean() < 0.9


def test_single_equals_batch():
    for pred, golds in _cases(50, seed=1):
        assert exact_match(pred, golds) == exact_match_batch([pred], [golds])[0]
        assert f1_score(pred, golds) == f1_batch([pred], [golds])[0]


def test_known_values():
    assert f1_score("Denver Broncos won", ["Denver Broncos"]) == pytest.approx(0.8)
    assert f1_score("Broncos", ["Carolina Panthers", "the Denver Broncos"]) == pytest.approx(2 / 3)
    assert exact_match("THE Denver-Broncos!", "denver broncos") == 0.0  # hyphen is removed, not spaced
    assert exact_match("THE Denver Broncos!", "denver broncos") == 1.0
    assert f1_score("a a b", ["a b b"]) == pytest.approx(2 / 3)  # articles dropped: [b] vs [b, b]
    assert f1_score("x x y", ["x y y"]) == pytest.approx(2 / 3)  # multiset overlap


def test_empty_prediction_and_empty_normalizing_golds():
    assert exact_match("", ["Paris"]) == 0.0 and f1_score("", ["Paris"]) == 0.0
    assert exact_match("", ["The"]) == 1.0  # both normalize to ""
    assert f1_score("", ["The"]) == 0.0  # official v1.1: no common token -> 0
    assert f1_score("Paris", ["the", "Paris"]) == 1.0
    assert exact_match("the", ["a"]) == 1.0


def test_empty_gold_list_raises_with_index():
    with pytest.raises(ValueError, match=r"golds_list\[1\]"):
        f1_batch(["a", "b"], [["a"], []])
    with pytest.raises(ValueError, match=r"golds_list\[0\]"):
        exact_match("a", [])
    with pytest.raises(ValueError, match="length mismatch"):
        exact_match_batch(["a"], [["a"], ["b"]])


def _ref_cover(answers: list[str], texts: list[str]) -> bool:
    """Naive token-span search with the reference normalization."""
    for text in texts:
        toks = ref_normalize(text).split()
        for a in answers:
            a_toks = ref_normalize(a).split()
            n = len(a_toks)
            if n and any(toks[i : i + n] == a_toks for i in range(len(toks) - n + 1)):
                return True
    return False


def test_cover_known_cases():
    assert answer_in_text("Denver Broncos", "The DENVER Broncos, who won in 2016.")
    assert not answer_in_text("Denver", "Denverites celebrated")
    assert not answer_in_text("Broncos Denver", "Denver Broncos")
    assert answer_in_text(["nope", "U.S."], "the US army")  # punctuation removed on both sides
    assert not answer_in_text(["The"], "the the the")  # empty after normalization never covers
    assert answer_in_text(["1605"], ["first observation", "Nov. 5, 1605."])
    assert not answer_in_text(["1605"], [])
    np.testing.assert_array_equal(
        cover_batch([["Paris"], ["x"], ["Rome"]], ["Paris!", ["y", "z"], ["a", "in rome"]]),
        [True, False, True],
    )
    with pytest.raises(ValueError, match=r"answers_list\[1\]"):
        cover_batch([["a"], []], ["a", "b"])


def test_cover_matches_naive_reference():
    rng = random.Random(2)
    answers_list, texts_list = [], []
    for _ in range(400):
        base = rng.choice(ANSWERS)
        answers = [base] + [_perturb(rng, base) for _ in range(rng.randint(0, 1))]
        obs = [
            f"{' '.join(rng.sample(FILLER, 4))} {_perturb(rng, rng.choice([base, *ANSWERS[:5]]))} {rng.choice(FILLER)}"
            for _ in range(rng.randint(1, 3))
        ]
        answers_list.append(answers)
        texts_list.append(obs if rng.random() < 0.5 else " ".join(obs))
    got = cover_batch(answers_list, texts_list)
    want = [
        _ref_cover(a, [t] if isinstance(t, str) else t) for a, t in zip(answers_list, texts_list, strict=True)
    ]
    np.testing.assert_array_equal(got, want)
    assert 0.1 < got.mean() < 0.9


def test_doctests():
    result = doctest.testmod(qa)
    assert result.attempted > 0 and result.failed == 0
