"""The request/response types, reasoning splitting and the HTTP backend's response parsing (no server)."""

from __future__ import annotations

import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion

from r3forge.backends import GenerationBackend, GenerationRequest, OpenAIHTTPBackend
from r3forge.backends.base import split_reasoning, truncate_at_stop
from r3forge.backends.openai_http import _parse_chat, _parse_completion


def test_request_validation():
    with pytest.raises(ValueError, match="exactly one"):
        GenerationRequest()
    with pytest.raises(ValueError, match="exactly one"):
        GenerationRequest(prompt="x", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="n >= 1"):
        GenerationRequest(prompt="x", n=0)
    with pytest.raises(ValueError, match="top_p"):
        GenerationRequest(prompt="x", top_p=0)
    chat = GenerationRequest(messages=[{"role": "user", "content": "hi"}], stop=["\n"], n=4)
    assert chat.is_chat and chat.stop == ("\n",) and chat.distinct_samples == 1  # greedy: sample once
    assert GenerationRequest(prompt="x", n=4, temperature=0.7).distinct_samples == 4
    assert hash(chat.sampling_key()) == hash(GenerationRequest(prompt="y", stop=("\n",), n=4).sampling_key())


def test_http_backend_satisfies_the_protocol():
    assert isinstance(
        OpenAIHTTPBackend(), GenerationBackend
    )  # HFLocalBackend: tests/backends/test_hf_local.py


def test_split_reasoning_formats():
    harmony = (
        "<|channel|>analysis<|message|>User asks capital. Answer Paris.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Paris<|return|>"
    )
    assert split_reasoning(harmony) == ("User asks capital. Answer Paris.", "Paris")
    assert split_reasoning("analysisUser asks capital.assistantfinalParis") == ("User asks capital.", "Paris")
    assert split_reasoning("Let me think.\n</think>\n\nParis") == ("Let me think.", "Paris")
    assert split_reasoning("The analysis says Paris") == (None, "The analysis says Paris")
    assert truncate_at_stop("Paris.\nNext", ["\n", "."]) == ("Paris", True)
    assert truncate_at_stop("Paris", ["\n"]) == ("Paris", False)


def _logprob(token: str, lp: float, top: list[tuple[str, float]]) -> dict:
    return {
        "token": token,
        "logprob": lp,
        "bytes": None,
        "top_logprobs": [{"token": t, "logprob": v} for t, v in top],
    }


def test_parse_gpt_oss_chat_response_with_reasoning_field():
    """A vLLM `--reasoning-parser openai_gptoss` response: reasoning apart, ids from vLLM's extensions."""
    payload = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "openai/gpt-oss-120b",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Paris", "reasoning": "The user asks a capital."},
                "token_ids": [12366, 200002],
                "logprobs": {
                    "content": [
                        # the chat endpoint's top list may hold the sampled token and be unsorted
                        _logprob("token_id:12366", -0.1, [("token_id:12366", -0.1), ("token_id:7", -3.0)]),
                        _logprob(
                            "token_id:200002", -0.01, [("token_id:5", -6.0), ("token_id:200002", -0.01)]
                        ),
                    ]
                },
            }
        ],
        "usage": {"prompt_tokens": 80, "completion_tokens": 2, "total_tokens": 82},
        "prompt_token_ids": [200006, 17360],
    }
    request = GenerationRequest(messages=[{"role": "user", "content": "Capital of France?"}], top_logprobs=1)
    result = _parse_chat(ChatCompletion.model_validate(payload), request)
    (choice,) = result.choices
    assert choice.text == "Paris" and choice.reasoning == "The user asks a capital."
    assert choice.token_ids == [12366, 200002] and choice.logprobs == [-0.1, -0.01]
    assert choice.top_logprobs == [{12366: -0.1}, {200002: -0.01}]  # best k=1, keyed by id
    assert result.prompt_token_ids == [200006, 17360]
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (80, 2)

    # older vLLM / DeepSeek: `reasoning_content`; a hosted API: no ids, token strings as keys
    payload["choices"][0]["message"] = {"role": "assistant", "content": "Paris", "reasoning_content": "Easy."}
    del payload["choices"][0]["token_ids"]
    payload["choices"][0]["logprobs"]["content"] = [
        _logprob("Paris", -0.1, [("Paris", -0.1), (" Lyon", -3.0)])
    ]
    request = GenerationRequest(messages=[{"role": "user", "content": "Capital of France?"}], top_logprobs=2)
    (choice,) = _parse_chat(ChatCompletion.model_validate(payload), request).choices
    assert choice.reasoning == "Easy." and choice.token_ids == []
    assert choice.top_logprobs == [{"Paris": -0.1, " Lyon": -3.0}]


def test_parse_completion_without_reasoning_parser():
    """GPT-OSS through /v1/completions: harmony markers are special tokens, skipped when decoding."""
    payload = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 0,
        "model": "gpt-oss",
        "choices": [
            {
                "index": 0,
                "text": "analysisShort question.assistantfinalParis",
                "finish_reason": "stop",
                "logprobs": {
                    "tokens": ["token_id:1", "token_id:2"],
                    "token_logprobs": [-0.5, -0.2],
                    "top_logprobs": [{"token_id:1": -0.5, "token_id:9": -1.5}, {"token_id:2": -0.2}],
                    "text_offset": [0, 8],
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    request = GenerationRequest(prompt="Capital of France?", top_logprobs=2)
    (choice,) = _parse_completion(Completion.model_validate(payload), request).choices
    assert (choice.reasoning, choice.text) == ("Short question.", "Paris")
    assert choice.token_ids == [1, 2]  # from the token_id:N strings when the server sent no token_ids
    assert choice.top_logprobs == [{1: -0.5, 9: -1.5}, {2: -0.2}]
