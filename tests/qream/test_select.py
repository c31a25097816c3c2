"""Dual-criteria rejection sampling: the hard filter's inclusion semantics, S_total selection, ties, the
ablation modes and dropped questions."""

from __future__ import annotations

import pytest

from r3forge.qream.select import RewriteCandidate, hard_filter, s_fact, s_perf, select_golden


@pytest.mark.parametrize(
    ("answer", "golds", "passes"),
    [
        ("The answer is Barack Obama.", ["Barack Obama"], True),
        ("the BARACK obama administration", ["barack Obama"], True),  # case
        ("It is 'The Beatles'!", ["Beatles"], True),  # articles and punctuation are normalized away
        ("Beatles", ["The Beatles"], True),
        ("Obamacare passed.", ["Obama"], False),  # whole tokens only
        ("Barack", ["Barack Obama"], False),  # the gold must be contained, not the other way round
        ("Paris, France", ["Lyon", "Paris"], True),  # any of several golds
        ("", ["Paris"], False),
        ("Paris", ["", "  "], False),  # no usable gold: nothing passes
    ],
)
def test_hard_filter(answer: str, golds: list[str], passes: bool) -> None:
    assert hard_filter(answer, golds) is passes


@pytest.mark.parametrize(
    ("answer", "golds", "passes"),
    [
        ("Shanghai", ["Shanghai"], True),
        ("shanghai.", ["Shanghai"], True),  # exact after normalization
        ("Hanggin Rear Banner has a larger population than Shanghai", ["Shanghai"], False),  # echo
        ("Shanghai has the larger population", ["Shanghai"], False),  # the guard is strict: EM only
        ("It is Shanghai, China", ["Shanghai", "Shanghai, China"], True),  # any gold may match exactly
        ("Beijing has more people", ["Beijing"], True),  # a gold the question does not name: containment
    ],
)
def test_echo_guard(answer: str, golds: list[str], passes: bool) -> None:
    question = "Which has the larger population, Shanghai or Hanggin Rear Banner?"
    assert hard_filter(answer, golds, question) is passes


def test_scores() -> None:
    assert s_perf("Paris", ["paris"]) == 1.0 and s_perf("London", ["Paris"]) == 0.0
    assert s_fact([]) == 0.0 and s_fact([True, False]) == 0.5


def cand(i: int, rnd: int, passes: bool, perf: float, fact: float) -> RewriteCandidate:
    return RewriteCandidate(i, rnd, f"c{i}", passes, perf, fact)


def test_dual_selects_max_s_total_among_passing() -> None:
    cs = [cand(0, 1, True, 0.4, 0.4), cand(1, 2, True, 0.6, 0.9), cand(2, 3, False, 1.0, 1.0)]
    golden, reason = select_golden(cs)
    assert (golden.index, reason) == (1, "") and golden.s_total == pytest.approx(0.75)


def test_ties_go_to_the_earlier_round_then_lower_index() -> None:
    cs = [cand(0, 2, True, 0.5, 0.5), cand(1, 1, True, 1.0, 0.0), cand(2, 1, True, 0.0, 1.0)]
    assert select_golden(cs)[0].index == 1  # all S_total 0.5: round 1 beats round 2, index 1 beats 2


def test_modes() -> None:
    cs = [cand(0, 1, True, 0.9, 0.1), cand(1, 2, True, 0.2, 0.7), cand(2, 3, False, 0.0, 1.0)]
    assert select_golden(cs, "utility")[0].index == 0
    assert select_golden(cs, "fidelity")[0].index == 2  # no filter in the fidelity-only ablation
    assert select_golden(cs, "none")[0].index == 2  # the last round, unscored
    with pytest.raises(ValueError, match="mode"):
        select_golden(cs, "both")


def test_dropped_questions() -> None:
    assert select_golden([]) == (None, "no_candidates")
    failing = [cand(0, 1, False, 1.0, 1.0), cand(1, 2, False, 0.9, 0.9)]
    assert select_golden(failing) == (None, "no_candidate_passes_filter")
    assert select_golden(failing, "utility") == (None, "no_candidate_passes_filter")
    assert select_golden(failing, "fidelity")[0].index == 0
