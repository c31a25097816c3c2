import pytest

from r3forge.metrics.stats import paired_bootstrap


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


def test_unpaired_input_is_refused():
    with pytest.raises(ValueError, match="got 2 and 3"):
        paired_bootstrap([0.0, 1.0], [0.0, 1.0, 1.0])
