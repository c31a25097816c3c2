"""IGP's uncertainty measure, from the top-K logprobs of a greedy probe rollout.

For a rollout of T generated steps (T = min(MT, the step that produced EOS), the EOS step included), each
step's top-K logprobs are renormalized over the top-K set and give an entropy H~_t; the normalized
uncertainty is

    NU = (1 / (T log K)) * sum_{t=1..T} H~_t              in [0, 1]

and a document's information gain is IG(d) = NU(q) - NU(q | d): how much reading d lowers the generator's
uncertainty about its answer. A step that returns fewer than K alternatives (a hosted API's cap of 20, a
server keyed by token text that merged two alternatives) is renormalized over what came back and still
divided by log K, as the formula has it: NU stays comparable across steps and probes, and such a step
counts as less uncertain than it may be. `k_short` reports how many steps that happened to.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def step_entropy(top: Mapping[Any, float]) -> float:
    """Entropy (nats) of one step's distribution renormalized over its top-K alternatives.

    >>> round(step_entropy({"a": math.log(0.5), "b": math.log(0.25)}), 4)  # renormalized: 2/3, 1/3
    0.6365
    >>> step_entropy({"a": -0.1})
    0.0
    """
    if not top:
        raise ValueError("a step without top-K logprobs: request top_logprobs=K from the backend")
    peak = max(top.values())
    weights = [math.exp(lp - peak) for lp in top.values()]  # stable: the best alternative has weight 1
    total = sum(weights)
    return max(0.0, -sum(w / total * math.log(w / total) for w in weights if w > 0))  # no -0.0


@dataclass(frozen=True)
class Uncertainty:
    nu: float  # normalized uncertainty in [0, 1]
    steps: int  # T, the steps averaged
    k_short: int  # steps with fewer than K alternatives


def normalized_uncertainty(
    top_logprobs: Sequence[Mapping[Any, float]], k: int, max_steps: int = 32
) -> Uncertainty:
    """NU of one rollout: `top_logprobs` holds one top-K dict per generated step (EOS step included, as the
    backends return it), `k` the K that was requested, `max_steps` MT.

    >>> two = {"x": math.log(0.5), "y": math.log(0.5)}      # H~ = log 2: maximal for K = 2
    >>> normalized_uncertainty([two, {"x": 0.0, "y": -50.0}], k=2)   # second step nearly certain
    Uncertainty(nu=0.5, steps=2, k_short=0)
    >>> normalized_uncertainty([two, two, two], k=2, max_steps=1).steps
    1
    """
    if k < 2:
        raise ValueError(f"K must be >= 2 (entropy over one alternative is always 0), got {k}")
    if max_steps < 1:
        raise ValueError(f"the maximum rollout MT must be >= 1, got {max_steps}")
    steps = list(top_logprobs)[:max_steps]
    if not steps:
        raise ValueError("a rollout without generated steps has no uncertainty")
    total = sum(step_entropy(top) for top in steps)
    nu = total / (len(steps) * math.log(k))
    return Uncertainty(nu=round(nu, 12), steps=len(steps), k_short=sum(len(top) < k for top in steps))


def information_gain(nu_question: float, nu_with_document: float) -> float:
    """IG(d) = NU(q) - NU(q | d): positive when the document makes the generator more certain.

    >>> information_gain(0.6, 0.25)
    0.35
    """
    return round(nu_question - nu_with_document, 12)
