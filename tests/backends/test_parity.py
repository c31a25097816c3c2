"""Greedy parity on the embedded model: same prompt token ids (same chat template), same generated tokens,
matching chosen-token and top-k logprobs across transformers, the vLLM server (HTTP) and the vLLM engine.

Tolerance: fp32, |Δ logprob| <= ATOL = 1e-3; observed on the CPU build: <= ~5e-5 (printed with `-s`)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("vllm")  # the server and the engine need it

from r3forge.backends import GenerationRequest, GenerationResult
from r3forge.backends.vllm_engine import VLLMEngineBackend, VLLMEngineConfig

# Two fp32 forwards of SmolLM2 that sum in other orders (other kernels, batching, KV cache): each logprob within
# 2·sqrt(L·k)·u·max|logit| (tests/conftest.py `Fp32`) with L = 30 layers, k = 1536 (the MLP's inner length)
# and |logit| <= 40 on these prompts (measured <= 34): 1.0e-3. A wrong chat template, position or a bf16
# engine is off by > 1e-2 (bf16: ~1e-2 and different tokens).
ATOL = 2 * math.sqrt(30 * 1536) * 2.0**-24 * 40


def max_logprob_diff(a: GenerationResult, b: GenerationResult, atol: float = ATOL) -> float:
    """Assert two greedy results agree; return the largest |Δ logprob| seen (chosen and top-k)."""
    assert a.prompt_token_ids == b.prompt_token_ids  # identical chat template and tokenization
    assert (a.usage.prompt_tokens, a.usage.completion_tokens) == (
        b.usage.prompt_tokens,
        b.usage.completion_tokens,
    )
    ca, cb = a.choices[0], b.choices[0]
    assert ca.token_ids == cb.token_ids and ca.text == cb.text and ca.finish_reason == cb.finish_reason
    worst = max(abs(x - y) for x, y in zip(ca.logprobs, cb.logprobs, strict=True))
    for ta, tb in zip(ca.top_logprobs, cb.top_logprobs, strict=True):
        assert len(ta) == len(tb)
        for key in ta.keys() & tb.keys():
            worst = max(worst, abs(ta[key] - tb[key]))
        # a near-tie at the k-th place may swap one id for another: only within the tolerance
        for key in ta.keys() ^ tb.keys():
            value, other = (ta[key], tb) if key in ta else (tb[key], ta)
            assert value <= min(other.values()) + atol, f"top-k id {key} ({value}) missing from {other}"
    assert worst <= atol, f"max |Δ logprob| {worst:.2e} > {atol}"
    return worst


def test_greedy_parity_hf_local_vs_http(
    make_http_backend, parity_requests: list[GenerationRequest], hf_parity: list[GenerationResult]
):
    http = make_http_backend().generate(parity_requests)
    worst = max(max_logprob_diff(h, s) for h, s in zip(hf_parity, http, strict=True))
    print(f"\nhf-local vs vLLM server (HTTP): max |Δ logprob| = {worst:.2e}")


@pytest.fixture(scope="module")
def vllm_engine(smollm2_path) -> VLLMEngineBackend:
    engine = VLLMEngineBackend(
        VLLMEngineConfig(model=str(smollm2_path), max_model_len=1024, cpu_kvcache_gib=1)
    )
    yield engine
    engine.close()


@pytest.mark.slow
def test_greedy_parity_three_backends(
    vllm_engine,
    make_http_backend,
    parity_requests: list[GenerationRequest],
    hf_parity: list[GenerationResult],
):
    engine = vllm_engine.generate(parity_requests)
    http = make_http_backend().generate(parity_requests)
    vs_hf = max(max_logprob_diff(h, e) for h, e in zip(hf_parity, engine, strict=True))
    vs_http = max(max_logprob_diff(s, e) for s, e in zip(http, engine, strict=True))
    print(f"\nvLLM engine vs hf-local: {vs_hf:.2e}; vLLM engine vs vLLM server: {vs_http:.2e}")
