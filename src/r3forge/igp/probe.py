"""IGP probes: greedy rollouts of the generator with top-K logprobs, without (NU(q)) and with one candidate
passage (NU(q | d)), and the information gain of every candidate.

The probing prompt (B) is short and neutral: the user turn is the question alone, or the passage and the
question; no instruction to answer from the passage, so the probe measures what the passage itself does
to the generator's uncertainty. The unconditional probe of a question is computed once and cached; the
N conditional probes of all questions go to the backend as one batch (vLLM's prefix caching shares the
chat-template prefix).

    gains = probe_gains(backend, ["Who wrote Hamlet?"], [["Hamlet is by Shakespeare.", "Paris is big."]])
    gains[0].ig  ->  [0.31, -0.02]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from r3forge.backends.base import GenerationBackend, GenerationRequest
from r3forge.igp.uncertainty import Uncertainty, information_gain, normalized_uncertainty

PROBE_VERSION = "igp_probe_v1"
CONDITIONAL = "{document}\n\n{question}"


@dataclass(frozen=True)
class ProbeConfig:
    k: int = field(default=128, metadata={"help": "K: top-K alternatives per step (hosted APIs cap at 20)."})
    max_steps: int = field(
        default=32, metadata={"min": 1, "help": "MT: maximum probe rollout length (tokens)."}
    )

    def __post_init__(self) -> None:
        if self.k < 2 or self.max_steps < 1:
            raise ValueError(f"IGP probes need K >= 2 and MT >= 1, got K={self.k}, MT={self.max_steps}")


def probe_request(question: str, document: str | None, config: ProbeConfig) -> GenerationRequest:
    """Prompt B: the question alone (unconditional) or passage + question (conditional); greedy."""
    content = question if document is None else CONDITIONAL.format(document=document, question=question)
    return GenerationRequest(
        messages=[{"role": "user", "content": content}],
        temperature=0.0,
        max_tokens=config.max_steps,
        top_logprobs=config.k,
    )


@dataclass
class QuestionGains:
    """One question's probes: NU(q), NU(q | d_i) and IG(d_i) = NU(q) - NU(q | d_i), in candidate order."""

    question: Uncertainty
    conditional: list[Uncertainty]

    @property
    def ig(self) -> list[float]:
        return [information_gain(self.question.nu, c.nu) for c in self.conditional]


def _nu(
    backend: GenerationBackend, requests: list[GenerationRequest], config: ProbeConfig
) -> list[Uncertainty]:
    results = backend.generate(requests)
    return [normalized_uncertainty(r.choices[0].top_logprobs, config.k, config.max_steps) for r in results]


def probe_gains(
    backend: GenerationBackend,
    questions: Sequence[str],
    candidates: Sequence[Sequence[str]],
    config: ProbeConfig = ProbeConfig(),
    cache: dict[str, Uncertainty] | None = None,
) -> list[QuestionGains]:
    """NU(q) (from `cache` when there, else probed and stored) and one batched call for every NU(q | d).

    `cache` maps question -> NU(q) for one backend and one `ProbeConfig`: keep one dict per configuration.
    """
    if len(questions) != len(candidates):
        raise ValueError(f"{len(questions)} questions but {len(candidates)} candidate lists")
    cache = {} if cache is None else cache
    missing = list(dict.fromkeys(q for q in questions if q not in cache))
    if missing:
        cache.update(
            zip(missing, _nu(backend, [probe_request(q, None, config) for q in missing], config), strict=True)
        )
    requests = [
        probe_request(q, d, config) for q, docs in zip(questions, candidates, strict=True) for d in docs
    ]
    flat = iter(_nu(backend, requests, config) if requests else [])
    return [
        QuestionGains(cache[q], [next(flat) for _ in docs])
        for q, docs in zip(questions, candidates, strict=True)
    ]
