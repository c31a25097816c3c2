"""HTTP backend against a real vLLM server of the embedded model, directly and through a fault proxy; and
against a loopback server that misbehaves (bad bodies, 500, 429, hangs; no model): each request is retried
alone and, out of retries, fails alone."""

from __future__ import annotations

import time

import pytest
import torch

from r3forge.backends import (
    BackendError,
    GenerationBackend,
    GenerationRequest,
    HFLocalBackend,
    OpenAIHTTPBackend,
    OpenAIHTTPConfig,
    PartialFailure,
    RequestFailed,
)
from r3forge.backends.vllm_server import free_port


def chat(question: str, **kwargs) -> GenerationRequest:
    return GenerationRequest(messages=[{"role": "user", "content": question}], **kwargs)


def test_chat_and_completions_return_ids_logprobs_usage(make_http_backend):
    backend = make_http_backend()
    assert isinstance(backend, GenerationBackend)
    requests = [
        chat("What is the capital of France?", max_tokens=12, top_logprobs=3),
        GenerationRequest(prompt="The capital of France is", max_tokens=12, top_logprobs=3, stop=("\n",)),
        chat("Name three colors.", n=3, temperature=1.0, seed=7, max_tokens=6),
        chat("Name three colors.", n=2, max_tokens=6),  # greedy n > 1: sampled once, copied
    ]
    by_chat, by_prompt, sampled, greedy = backend.generate(requests)
    for result in (by_chat, by_prompt):
        c = result.choices[0]
        assert c.token_ids and len(c.token_ids) == len(c.logprobs) == len(c.top_logprobs)
        assert all(
            len(top) == 3 and list(top.values()) == sorted(top.values(), reverse=True)
            for top in c.top_logprobs
        )
        assert all(isinstance(key, int) for top in c.top_logprobs for key in top)
        assert c.token_ids[0] == next(iter(c.top_logprobs[0]))  # greedy: the best alternative
        assert result.usage.completion_tokens == len(c.token_ids)
        assert result.usage.prompt_tokens == len(result.prompt_token_ids)
    assert "Paris" in by_chat.choices[0].text and by_chat.choices[0].finish_reason == "stop"
    assert by_prompt.choices[0].text.strip() == "Paris." and by_prompt.choices[0].finish_reason == "stop"
    assert len(sampled.choices) == 3 and sampled.usage.completion_tokens == sum(
        len(c.token_ids) for c in sampled.choices
    )
    assert len(greedy.choices) == 2 and greedy.choices[0].token_ids == greedy.choices[1].token_ids
    assert backend.stats.requests == 4 and backend.stats.retries == 0
    assert backend.stats.usage.completion_tokens == sum(
        r.usage.completion_tokens for r in (by_chat, by_prompt, sampled, greedy)
    )


def test_sampled_chat_top_k_is_exact(make_http_backend, hf_backend: HFLocalBackend):
    """vLLM's chat endpoint lists the sampled token first even outside the top k; the backend asks for k+1
    and keeps the k best: the top-k ids equal a teacher-forced forward pass's."""
    (result,) = make_http_backend().generate(
        [chat("Invent a word.", temperature=2.0, seed=3, max_tokens=8, top_logprobs=2)]
    )
    choice = result.choices[0]
    ids = torch.tensor([result.prompt_token_ids + choice.token_ids])  # [1, P + T]
    with torch.no_grad():
        expected = (
            hf_backend.model(ids).logits[0, len(result.prompt_token_ids) - 1 : -1].log_softmax(-1)
        )  # [T, V]
    outside = 0
    for t, token in enumerate(choice.token_ids):
        values, top_ids = expected[t].topk(3)
        if values[1] - values[2] > 1e-3:  # skip near-ties for 2nd place
            assert set(choice.top_logprobs[t]) == set(top_ids[:2].tolist())
        outside += token not in top_ids[:2].tolist()
    assert outside > 0  # temperature 2 sampled some token outside the top 2: the case being tested


def test_top_logprobs_over_the_cap_fails_before_calling(make_http_backend):
    backend = make_http_backend()
    with pytest.raises(BackendError, match="hosted OpenAI-compatible APIs allow at most 20"):
        backend.generate([chat("hi", top_logprobs=21)])
    assert backend.stats.attempts == 0


def test_client_errors_are_not_retried(make_http_backend, vllm_server):
    backend = make_http_backend(model="no-such-model")
    with pytest.raises(BackendError, match=r"HTTP 404 \(not retried\)"):
        backend.generate([chat("hi", max_tokens=2)])
    assert backend.stats.attempts == 1


def test_concurrency_is_bounded_and_model_discovered(make_http_backend, fault_proxy):
    proxy = fault_proxy()
    backend = make_http_backend(base_url=proxy.base_url, max_concurrency=3, model="")  # "": ask /v1/models
    results = backend.generate([chat(f"Count to {i}.", max_tokens=8) for i in range(12)])
    assert len(results) == 12 and all(r.choices[0].token_ids for r in results)
    assert proxy.counts["pass"] == 1 + 12  # GET /models, then the 12 generations
    assert 2 <= proxy.max_in_flight <= 3


def test_batch_survives_injected_faults(make_http_backend, fault_proxy):
    """429 (Retry-After: 1 s), 500 and dropped connections on ~40% of calls: the batch completes with
    the same answers as without the proxy, and every injected fault was retried exactly once."""
    requests = [
        chat(f"Give me a fact about the number {i}.", max_tokens=8, top_logprobs=2) for i in range(16)
    ]
    requests += [GenerationRequest(prompt=f"{i} plus {i} equals", max_tokens=4) for i in range(4)]
    direct = make_http_backend().generate(requests)
    proxy = fault_proxy(rates={"429": 0.15, "500": 0.15, "drop": 0.1}, seed=1)
    backend = make_http_backend(
        base_url=proxy.base_url, max_concurrency=8, backoff_base_s=0.05, max_retries=8
    )
    proxied = backend.generate(requests)
    for a, b in zip(direct, proxied, strict=True):
        assert a.choices[0].token_ids == b.choices[0].token_ids and a.choices[0].text == b.choices[0].text
    assert min(proxy.counts["429"], proxy.counts["500"], proxy.counts["drop"]) > 0
    assert backend.stats.retries == proxy.faults
    assert backend.stats.retries_by_reason == {
        "429": proxy.counts["429"],
        "500": proxy.counts["500"],
        "connection": proxy.counts["drop"],
    }
    assert backend.stats.requests == len(requests) == proxy.counts["pass"]
    assert backend.stats.retry_wait_s >= proxy.counts["429"] * 1.0  # Retry-After honoured
    print(
        f"\nfault proxy fates: {dict(proxy.counts)}; backend retries: {dict(backend.stats.retries_by_reason)}"
    )


def test_timeout_is_retried(make_http_backend, fault_proxy):
    proxy = fault_proxy(plan=["stall"], stall_s=30)
    backend = make_http_backend(base_url=proxy.base_url, request_timeout_s=3, backoff_base_s=0.05)
    (result,) = backend.generate([chat("What is the capital of France?", max_tokens=4)])
    assert result.choices[0].token_ids and backend.stats.retries_by_reason == {"timeout": 1}


def test_stopped_server_gives_a_clear_error_after_the_retry_budget(make_http_backend):
    backend = make_http_backend(
        base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=3, backoff_base_s=0.05
    )
    start = time.monotonic()
    with pytest.raises(BackendError) as err:
        backend.generate([chat("hi", max_tokens=2)])
    message = str(err.value)
    assert "failed after 4 attempts" in message and "(connection)" in message
    assert "r3forge serve llm" in message and "127.0.0.1" in message
    assert backend.stats.attempts == 4 and backend.stats.retries == 3
    assert time.monotonic() - start < 10


def test_bad_responses_are_retried_and_a_request_out_of_retries_fails_alone(fault_server):
    """A truncated body, `{"oops": true}`, a completion without the logprobs asked for, 500, 429 and a hang,
    once each: retried, answered. The same faults every time: those requests fail with a reason code, the
    others of the batch come back."""
    once = ["truncated", "oops", "nologprobs", "500", "429", "hang"]
    prompts = [f"fault={f} times=1" for f in once] + [
        f"fault={f} times=9" for f in ("oops", "truncated", "429")
    ]
    prompts.append("reply=fine_thanks")
    backend = OpenAIHTTPBackend(
        OpenAIHTTPConfig(
            base_url=fault_server.base_url, model="teacher", max_retries=2, backoff_base_s=0.01,
            backoff_max_s=0.05, request_timeout_s=2.5,  # a loaded CPU's answer well within it
        )
    )  # fmt: skip
    with pytest.raises(PartialFailure, match="3 of 10 requests failed") as err:
        backend.generate([chat(p, max_tokens=4, top_logprobs=1) for p in prompts])
    results = err.value.results
    failed = [(prompts[i], r.reason) for i, r in enumerate(results) if isinstance(r, RequestFailed)]
    assert failed == [
        ("fault=oops times=9", "bad_response"),
        ("fault=truncated times=9", "bad_response"),
        ("fault=429 times=9", "rate_limited"),
    ]
    assert "failed after 3 attempts" in str(results[6]) and fault_server.base_url in str(results[6])
    answered = [r for r in results if not isinstance(r, RequestFailed)]
    assert [r.choices[0].text for r in answered] == ["ok"] * 6 + ["fine thanks"]
    assert all(r.choices[0].logprobs == [-0.5] * len(r.choices[0].text.split()) for r in answered)
    faults = backend.faults
    by_cause = {"429": 1 + 2, "500": 1, "bad_response": 3 + 2 * 2, "timeout": 1}
    assert faults["retries_by_cause"] == by_cause, faults
    assert faults["timeouts"] == 1 and faults["failed_requests"] == {"bad_response": 2, "rate_limited": 1}
    assert faults["retries"] == 1 + 3 + 7 + 1 and backend.stats.requests == 7
