"""Backend fixtures: the transformers backend, parity requests, HTTP backends for the session's vLLM server
(`vllm_server`, `fault_proxy` and `FaultProxy` live in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from r3forge.backends import (
    GenerationRequest,
    GenerationResult,
    HFLocalBackend,
    HFLocalConfig,
    OpenAIHTTPBackend,
    OpenAIHTTPConfig,
)
from r3forge.backends.vllm_server import VLLMServer


@pytest.fixture(scope="session")
def hf_backend(smollm2_path: Path) -> HFLocalBackend:
    return HFLocalBackend.from_config(HFLocalConfig(model=str(smollm2_path)))


@pytest.fixture(scope="session")
def parity_requests() -> list[GenerationRequest]:
    """Greedy chat and raw-prompt requests with top-5 logprobs, shared by the parity tests."""
    questions = ["What is the capital of France?", "Name three colors.", "Write a haiku about rain."]
    requests = [
        GenerationRequest(messages=[{"role": "user", "content": q}], max_tokens=12, top_logprobs=5)
        for q in questions
    ]
    return [*requests, GenerationRequest(prompt="The capital of France is", max_tokens=12, top_logprobs=5)]


@pytest.fixture(scope="session")
def hf_parity(hf_backend: HFLocalBackend, parity_requests) -> list[GenerationResult]:
    """The transformers backend's answers to `parity_requests`, generated once in one padded batch."""
    return hf_backend.generate(parity_requests)


@pytest.fixture
def make_http_backend(vllm_server: VLLMServer) -> Callable[..., OpenAIHTTPBackend]:
    """`make_http_backend(base_url=None, **config_fields)`: an HTTP backend for the session's server."""

    def make(base_url: str | None = None, **fields) -> OpenAIHTTPBackend:
        fields.setdefault("model", vllm_server.model_name)
        return OpenAIHTTPBackend(OpenAIHTTPConfig(base_url=base_url or vllm_server.base_url, **fields))

    return make
