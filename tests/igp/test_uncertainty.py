"""NU and IG against a hand computation from the embedded model's real logits: a greedy probe through the
transformers backend vs a teacher-forced forward pass; EOS before MT; fewer alternatives than K; ties."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from r3forge.backends import HFLocalBackend, HFLocalConfig
from r3forge.backends.base import GenerationRequest
from r3forge.igp.uncertainty import information_gain, normalized_uncertainty, step_entropy

K, MT = 8, 6


@pytest.fixture(scope="module")
def backend(smollm2_path: Path) -> HFLocalBackend:
    return HFLocalBackend.from_config(HFLocalConfig(model=str(smollm2_path)))


def by_hand(
    backend: HFLocalBackend, request: GenerationRequest, generated: list[int], k: int, mt: int, fp32
) -> tuple[float, float]:
    """Teacher-forced logits of prompt + generated ids; per step: top-k softmax entropy; mean / log k. And
    the tolerance of a greedy probe's NU against it: the probe's logprobs come from another fp32 pass (a KV
    cache, other shapes), each within 2·sqrt(L·k)·u·max|logit| (~9e-4), and a top-k entropy moves by at most
    2·H·max|Δ logprob| <= 2·log k·max|Δ logprob|, so NU by twice the logprob bound (~2e-3). Another K, a
    step too many or too few, or the context left out moves NU by > 1e-2."""
    prompt = backend.encode(request)
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        logits = backend.model(ids).logits[0]  # [P+T, V]
    steps = min(mt, len(generated))
    total = 0.0
    for t in range(steps):
        top = torch.topk(logits[len(prompt) - 1 + t].double(), k).values  # logits predicting token t
        p = torch.softmax(top, dim=-1)
        total += float(-(p * p.log()).sum())
    scale = logits[len(prompt) - 1 : len(prompt) - 1 + steps].abs().max()
    return total / (steps * math.log(k)), 2 * fp32.atol(scale, fp32.forward_length(backend.model.config))


def test_nu_matches_a_teacher_forced_hand_computation(backend: HFLocalBackend, fp32) -> None:
    question = "Who wrote the novel Moby-Dick? Answer briefly."
    context = "Moby-Dick is an 1851 novel by the American writer Herman Melville."
    nus = []
    for content in (question, f"{context}\n\n{question}"):
        request = GenerationRequest(messages=[{"role": "user", "content": content}], max_tokens=MT,
                                    top_logprobs=K)  # fmt: skip
        choice = backend.generate([request])[0].choices[0]
        got = normalized_uncertainty(choice.top_logprobs, k=K, max_steps=MT)
        assert got.steps == len(choice.token_ids) <= MT and got.k_short == 0
        want, atol = by_hand(backend, request, choice.token_ids, K, MT, fp32)
        assert got.nu == pytest.approx(want, abs=atol)
        assert 0.0 <= got.nu <= 1.0
        nus.append(got.nu)
    assert information_gain(*nus) == pytest.approx(nus[0] - nus[1])


def test_eos_before_mt_ends_the_rollout(backend: HFLocalBackend, fp32) -> None:
    request = GenerationRequest(messages=[{"role": "user", "content": "Say only the word: yes"}], max_tokens=32,
                                top_logprobs=K)  # fmt: skip
    choice = backend.generate([request])[0].choices[0]
    assert choice.finish_reason == "stop" and len(choice.token_ids) < 32
    assert choice.token_ids[-1] in backend.eos_ids  # the EOS step is one of the T steps
    got = normalized_uncertainty(choice.top_logprobs, k=K, max_steps=32)
    assert got.steps == len(choice.token_ids)
    want, atol = by_hand(backend, request, choice.token_ids, K, 32, fp32)
    assert got.nu == pytest.approx(want, abs=atol)


def test_fewer_alternatives_than_k(backend: HFLocalBackend) -> None:
    request = GenerationRequest(messages=[{"role": "user", "content": "Name a color."}], max_tokens=3,
                                top_logprobs=K)  # fmt: skip
    steps = backend.generate([request])[0].choices[0].top_logprobs
    capped = [dict(list(top.items())[:3]) for top in steps]  # a server that returned only 3 of K = 8
    got = normalized_uncertainty(capped, k=K)
    assert got.k_short == len(steps)
    expected = 0.0
    for top in capped:  # renormalized over the 3 that came back, still divided by log K
        p = torch.softmax(torch.tensor(list(top.values()), dtype=torch.float64), dim=-1)
        expected += float(-(p * p.log()).sum())
    # the same float64 arithmetic on the same logprobs in another order: ~1e-16, 1e-9 is a readable bound
    assert got.nu == pytest.approx(expected / (len(steps) * math.log(K)), abs=1e-9)


def test_ties_and_bounds() -> None:
    uniform = dict.fromkeys(range(K), -math.log(K))  # K tied alternatives: maximal entropy
    assert step_entropy(uniform) == pytest.approx(math.log(K))
    assert normalized_uncertainty([uniform] * 3, k=K).nu == pytest.approx(1.0)
    certain = {0: 0.0, **dict.fromkeys(range(1, K), -1e4)}
    assert normalized_uncertainty([certain], k=K).nu == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="top_logprobs"):
        normalized_uncertainty([{}], k=K)
    with pytest.raises(ValueError, match="K must be"):
        normalized_uncertainty([uniform], k=1)
