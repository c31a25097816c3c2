"""Uncertainty of a comparison: the paired bootstrap over questions (and over training seeds) that the
benchmarks' tables report."""

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


def seeds_bootstrap(
    a: list[list[float]], b: list[list[float]], samples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of b - a over training seeds and questions, with a 95% interval that resamples both: each
    resampling draws the seeds (rows) with replacement, then the questions (columns) with replacement, and
    takes the mean difference over the drawn cells. Row s of `a` and of `b` are paired (the same seed, or a
    warm start repeated for every seed) and so are the columns (the same questions).

    >>> seeds_bootstrap([[0.0, 0.0]] * 3, [[1.0, 1.0]] * 3)
    (1.0, 1.0, 1.0)
    >>> mean, low, high = seeds_bootstrap([[0.0] * 40] * 3, [[1.0] * 8 + [0.0] * 32] * 3)
    >>> mean, low < mean < high
    (0.2, True)
    """
    if len(a) != len(b) or not a or any(len(x) != len(y) or not x for x, y in zip(a, b, strict=True)):
        raise ValueError("seeds_bootstrap needs two equally shaped, non-empty [seeds][questions] tables")
    questions = len(a[0])
    if any(len(x) != questions for x in a):
        raise ValueError("seeds_bootstrap: every seed needs the same questions")
    diffs = [[y - x for x, y in zip(ra, rb, strict=True)] for ra, rb in zip(a, b, strict=True)]
    rng = random.Random(seed)
    means = []
    for _ in range(samples):
        rows = rng.choices(range(len(diffs)), k=len(diffs))
        cols = rng.choices(range(questions), k=questions)
        means.append(sum(diffs[r][c] for r in rows for c in cols) / (len(rows) * questions))
    means.sort()
    mean = sum(map(sum, diffs)) / (len(diffs) * questions)
    return mean, means[int(0.025 * samples)], means[int(0.975 * samples) - 1]
