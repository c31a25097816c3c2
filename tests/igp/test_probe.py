"""IGP probes with the embedded model: NU(q) once per question (cached), every NU(q | d) in one batched
call, and IG = NU(q) - NU(q | d) equal to probing each prompt on its own."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from r3forge.backends import HFLocalBackend, HFLocalConfig
from r3forge.igp.probe import ProbeConfig, probe_gains, probe_request
from r3forge.igp.uncertainty import normalized_uncertainty

CONFIG = ProbeConfig(k=8, max_steps=6)
QUESTIONS = ["Who wrote Hamlet?", "What is the capital of Peru?"]
DOCS = [["Hamlet is a tragedy by William Shakespeare.", "The Nile is a river in Africa."],
        ["Lima is the capital and largest city of Peru."]]  # fmt: skip


@pytest.fixture(scope="module")
def backend(smollm2_path: Path) -> HFLocalBackend:
    return HFLocalBackend.from_config(HFLocalConfig(model=str(smollm2_path), batch_size=4))


def nu_atol(backend: HFLocalBackend, request, fp32) -> float:
    """|Δ NU| of one probe batched vs alone: each logprob is within 2·sqrt(L·k)·u·max|logit| (two fp32 passes
    that sum in other orders, ~9e-4) and a top-k entropy moves by at most 2·log k·max|Δ logprob|, so NU by
    twice that (~2e-3); the prompt's logits stand for the scale. Another document, K or step count moves NU
    by > 1e-2."""
    with torch.no_grad():
        scale = backend.model(torch.tensor([backend.encode(request)])).logits.abs().max()
    return 2 * fp32.atol(scale, fp32.forward_length(backend.model.config))


def test_batched_cached_and_equal_to_single_probes(backend: HFLocalBackend, counting_backend, fp32) -> None:
    counting, cache = counting_backend(backend), {}
    gains = probe_gains(counting, QUESTIONS, DOCS, CONFIG, cache)
    assert (counting.calls, counting.requests) == (2, 5)  # unconditional batch + one conditional batch
    assert set(cache) == set(QUESTIONS)
    for question, docs, g in zip(QUESTIONS, DOCS, gains, strict=True):
        request = probe_request(question, None, CONFIG)
        alone = backend.generate([request])[0].choices[0]
        want = normalized_uncertainty(alone.top_logprobs, 8, 6).nu
        assert g.question.nu == pytest.approx(want, abs=nu_atol(backend, request, fp32))
        for doc, conditional, ig in zip(docs, g.conditional, g.ig, strict=True):
            request = probe_request(question, doc, CONFIG)
            single = backend.generate([request])[0].choices[0]
            want = normalized_uncertainty(single.top_logprobs, 8, 6).nu
            assert conditional.nu == pytest.approx(want, abs=nu_atol(backend, request, fp32))
            assert ig == pytest.approx(g.question.nu - conditional.nu)  # the same float64 subtraction
    again = probe_gains(counting, QUESTIONS[:1], DOCS[:1], CONFIG, cache)
    assert counting.calls == 3 and again[0].question == gains[0].question  # NU(q) came from the cache


def test_prompt_and_config() -> None:
    request = probe_request("Q?", "Some passage.", CONFIG)
    assert request.messages[0]["content"] == "Some passage.\n\nQ?" and request.temperature == 0.0
    assert (request.max_tokens, request.top_logprobs) == (6, 8)
    with pytest.raises(ValueError, match="K >= 2"):
        ProbeConfig(k=1)
    with pytest.raises(ValueError, match="candidate lists"):
        probe_gains(None, ["q"], [], CONFIG)
