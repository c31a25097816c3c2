"""Uncertainty of a comparison: the paired bootstrap over questions that the benchmarks' tables report."""

from __future__ import annotations

import random


def paired_bootstrap(
    a: list[float], b: list[float], samples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of b - a over paired items (the same questions scored twice) and its 95% percentile interval,
    from `samples` seeded resamplings of the items.

    >>> paired_bootstrap([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
    (1.0, 1.0, 1.0)
    >>> mean, low, high = paired_bootstrap([0.0] * 50, [1.0] * 10 + [0.0] * 40)
    >>> mean, low < mean < high
    (0.2, True)
    """
    if len(a) != len(b) or not a:
        raise ValueError(
            f"paired_bootstrap needs two equally long, non-empty lists; got {len(a)} and {len(b)}"
        )
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=len(diffs))) / len(diffs) for _ in range(samples))
    return sum(diffs) / len(diffs), means[int(0.025 * samples)], means[int(0.975 * samples) - 1]
