import random

import pytest

from r3forge.metrics.stats import paired_bootstrap, seeds_bootstrap


def test_the_interval_holds_the_mean_and_narrows_with_more_questions():
    small = paired_bootstrap([0.0] * 20, [1.0] * 4 + [0.0] * 16)
    large = paired_bootstrap([0.0] * 200, [1.0] * 40 + [0.0] * 160)
    assert small[0] == pytest.approx(0.2) and large[0] == pytest.approx(0.2)
    assert small[1] <= 0.2 <= small[2] and large[1] <= 0.2 <= large[2]
    assert large[2] - large[1] < small[2] - small[1]
    assert large[1] > 0.0  # 40 of 200 better, none worse: the interval excludes zero


def test_pairs_are_compared_item_by_item():
    # the same values in another order: the means agree, the paired differences do not vanish
    mean, low, high = paired_bootstrap([0.0, 1.0] * 10, [1.0, 0.0] * 10)
    assert mean == 0.0 and low < 0.0 < high


def _unpaired_interval(a: list[float], b: list[float], samples: int = 2000) -> tuple[float, float]:
    """The 95% interval of mean(b) - mean(a) when a and b are resampled independently (the wrong test here)."""
    rng = random.Random(1)
    means = sorted(
        sum(rng.choices(b, k=len(b))) / len(b) - sum(rng.choices(a, k=len(a))) / len(a)
        for _ in range(samples)
    )
    return means[int(0.025 * samples)], means[int(0.975 * samples) - 1]


def test_correlated_pairs_give_a_narrower_interval_than_an_unpaired_bootstrap():
    # hard and easy questions: both systems score alike per question, b is better on 10 of 100 by 0.5
    rng = random.Random(0)
    a = [rng.choice([0.0, 0.25, 0.75, 1.0]) for _ in range(100)]
    b = [min(1.0, x + 0.5) if i % 10 == 0 else x for i, x in enumerate(a)]
    mean, low, high = paired_bootstrap(a, b)
    u_low, u_high = _unpaired_interval(a, b)
    assert low <= mean <= high and u_low <= mean <= u_high
    assert high - low < 0.5 * (u_high - u_low)  # pairing removes the between-question variance
    assert low > 0.0 > u_low  # only the paired test sees that b is better


def test_unpaired_input_is_refused():
    with pytest.raises(ValueError, match="got 2 and 3"):
        paired_bootstrap([0.0, 1.0], [0.0, 1.0, 1.0])


def test_seed_spread_widens_the_interval_that_questions_alone_would_give():
    before = [[0.0] * 60] * 3
    agree = [[1.0] * 12 + [0.0] * 48] * 3  # every seed +0.2
    disagree = [[1.0] * 36 + [0.0] * 24, [0.0] * 60, [0.0] * 60]  # one seed +0.6, two +0: the same mean
    a, b = seeds_bootstrap(before, agree), seeds_bootstrap(before, disagree)
    assert a[0] == pytest.approx(0.2) and b[0] == pytest.approx(0.2)
    assert a[1] > 0.0  # consistent over seeds: excludes zero
    assert b[1] <= 0.0 + 1e-9 and b[2] - b[1] > a[2] - a[1]  # one lucky seed: the interval reaches zero


def test_seed_tables_must_be_equally_shaped():
    with pytest.raises(ValueError, match="equally shaped"):
        seeds_bootstrap([[0.0, 1.0]], [[0.0, 1.0]] * 2)
    with pytest.raises(ValueError, match="same questions"):
        seeds_bootstrap([[0.0, 1.0], [0.0]], [[0.0, 1.0], [1.0]])
