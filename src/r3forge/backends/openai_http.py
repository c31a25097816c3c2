"""OpenAI-compatible HTTP backend (`openai.AsyncOpenAI`): vLLM's server and hosted APIs.

* Chat requests go to `/v1/chat/completions`, raw prompts to `/v1/completions`.
* Bounded concurrency (a semaphore, released while a request waits to retry).
* Retries with exponential backoff and jitter on 408/409/429/5xx, timeouts and connection errors
  (resets, refused); a `Retry-After` / `retry-after-ms` header is honoured (capped). Other 4xx fail at
  once. After the retry budget the batch fails with a `BackendError` that says what happened and where.
* Usage accounting and retry counters in `backend.stats`.

Top-k logprobs. Hosted APIs cap `top_logprobs` at 20 (vLLM's server too, unless started with a larger
`--max-logprobs`), so IGP's K (entropy over the renormalized top-K) cannot exceed 20 against them;
`max_top_logprobs` states the cap and a larger request fails before any call. vLLM's chat endpoint
returns the *sampled* token plus the top k-1 when the sampled token falls outside the top k; with
`vllm_extensions` the backend asks for k+1 (when the cap allows) and keeps the k best, which is the exact
top k. Token ids: with `vllm_extensions` the request carries vLLM's `return_token_ids` and
`return_tokens_as_token_ids`, so generated ids, prompt ids and the keys of the top-k dicts are vocabulary
ids; without (hosted APIs reject unknown fields) ids stay empty and top-k keys are token strings.

Reasoning models (GPT-OSS, DeepSeek-R1, Qwen3): a message's separate `reasoning` (vLLM >= 0.10) or
`reasoning_content` (older vLLM, DeepSeek's API) field becomes `Choice.reasoning`; without one, the
text is split with `split_reasoning` (harmony channels, `<think>` tags), so `Choice.text` is the final
answer only.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from r3forge.backends.base import (
    BackendError,
    Choice,
    GenerationRequest,
    GenerationResult,
    TokenKey,
    Usage,
    split_reasoning,
    with_n_choices,
)
from r3forge.retry import Backoff, retry_after, retryable_status

_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


@dataclass
class OpenAIHTTPConfig:
    base_url: str = field(
        default="http://127.0.0.1:8000/v1", metadata={"help": "OpenAI-compatible API root (ends in /v1)."}
    )
    model: str = field(
        default="", metadata={"help": "Model name sent with each request; empty: the server's first model."}
    )
    api_key: str = field(
        default="", metadata={"help": "API key; empty: $OPENAI_API_KEY, else 'EMPTY' (vLLM ignores it)."}
    )
    max_concurrency: int = field(default=32, metadata={"help": "Requests in flight at once."})
    request_timeout_s: float = field(default=120.0, metadata={"help": "Timeout of one HTTP call (s)."})
    max_retries: int = field(default=6, metadata={"help": "Retries per request before the batch fails."})
    backoff_base_s: float = field(
        default=0.5, metadata={"help": "First retry delay (s), doubled each retry."}
    )
    backoff_max_s: float = field(default=30.0, metadata={"help": "Cap of the exponential backoff (s)."})
    max_retry_after_s: float = field(default=60.0, metadata={"help": "Cap on a server's Retry-After (s)."})
    vllm_extensions: bool = field(
        default=True,
        metadata={"help": "Send vLLM's token-id fields (turn off for hosted APIs, which reject them)."},
    )
    max_top_logprobs: int = field(
        default=20, metadata={"help": "Server cap on top_logprobs: 20 on hosted APIs and vLLM's default."}
    )
    request_logprobs: bool = field(
        default=True,
        metadata={"help": "Ask for chosen-token logprobs (turn off for hosted models that reject logprobs)."},
    )
    jitter_seed: int = field(default=0, metadata={"help": "Seed of the backoff jitter."})


@dataclass
class HTTPStats:
    """Counters over the backend's lifetime."""

    requests: int = 0  # successful calls
    attempts: int = 0  # calls made, including failed ones
    retries: int = 0
    retries_by_reason: Counter = field(default_factory=Counter)  # "429", "500", "timeout", "connection", ...
    retry_wait_s: float = 0.0  # summed backoff sleeps
    usage: Usage = field(default_factory=Usage)


class OpenAIHTTPBackend:
    """`GenerationBackend` over an OpenAI-compatible server. `await agenerate(...)` inside an event loop."""

    name = "openai-http"

    def __init__(self, config: OpenAIHTTPConfig | None = None):
        self.config = config or OpenAIHTTPConfig()
        self.stats = HTTPStats()
        cfg = self.config
        self._backoff = Backoff(cfg.max_retries, cfg.backoff_base_s, cfg.backoff_max_s, cfg.max_retry_after_s,
                                cfg.jitter_seed)  # fmt: skip
        self._model = self.config.model

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.agenerate(requests))
        raise BackendError(
            "OpenAIHTTPBackend.generate() was called inside a running event loop; use agenerate()"
        )

    def close(self) -> None:
        """Nothing to release: each `agenerate` call opens and closes its own connection pool."""

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        for request in requests:
            if request.top_logprobs > self.config.max_top_logprobs:
                raise BackendError(
                    f"top_logprobs={request.top_logprobs} exceeds this server's cap of "
                    f"{self.config.max_top_logprobs} (hosted OpenAI-compatible APIs allow at most 20; a vLLM "
                    "server allows its --max-logprobs). IGP needs K <= that cap over HTTP; for a larger K use "
                    "a vLLM server started with a larger --max-logprobs, the vLLM engine or the hf backend."
                )
        api_key = self.config.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        async with openai.AsyncOpenAI(
            base_url=self.config.base_url,
            api_key=api_key,
            max_retries=0,  # retries are ours: counted, jittered, Retry-After aware
            timeout=self.config.request_timeout_s,
        ) as client:
            if not self._model:
                self._model = await self._first_model(client)
            semaphore = asyncio.Semaphore(self.config.max_concurrency)
            tasks = [asyncio.create_task(self._one(client, semaphore, r)) for r in requests]
            try:
                return list(await asyncio.gather(*tasks))
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise

    async def _first_model(self, client: openai.AsyncOpenAI) -> str:
        models = await self._with_retries(client.models.list, {}, asyncio.Semaphore(1), "GET /models")
        if not models.data:
            raise BackendError(f"{self.config.base_url}/models lists no model; set `model` explicitly")
        return models.data[0].id

    async def _one(
        self, client: openai.AsyncOpenAI, semaphore: asyncio.Semaphore, request: GenerationRequest
    ) -> GenerationResult:
        if request.is_chat:
            create, what = client.chat.completions.create, "POST /chat/completions"
        else:
            create, what = client.completions.create, "POST /completions"
        response = await self._with_retries(create, self._params(request), semaphore, what)
        result = _parse_chat(response, request) if request.is_chat else _parse_completion(response, request)
        result = with_n_choices(result, request.n)
        self.stats.requests += 1
        self.stats.usage.add(result.usage)
        return result

    def _params(self, request: GenerationRequest) -> dict[str, Any]:
        cfg, k = self.config, request.top_logprobs
        params: dict[str, Any] = {"model": self._model, "n": request.distinct_samples}
        params["temperature"] = request.temperature
        params["top_p"] = request.top_p
        if request.stop:
            params["stop"] = list(request.stop)
        if request.seed is not None:
            params["seed"] = request.seed
        if cfg.vllm_extensions:
            params["extra_body"] = {"return_token_ids": True, "return_tokens_as_token_ids": True}
        if request.is_chat:
            params |= {"messages": list(request.messages), "max_completion_tokens": request.max_tokens}
            if cfg.request_logprobs or k:
                # one extra alternative on vLLM makes the chat endpoint's top-k exact (module docstring)
                asked = min(k + 1, cfg.max_top_logprobs) if cfg.vllm_extensions and k else k
                params |= {"logprobs": True, "top_logprobs": asked}
        else:
            params |= {"prompt": request.prompt, "max_tokens": request.max_tokens}
            if cfg.request_logprobs or k:
                params["logprobs"] = k
        return params

    async def _with_retries(self, call, params: dict, semaphore: asyncio.Semaphore, what: str) -> Any:
        cfg, start = self.config, time.monotonic()
        for attempt in range(cfg.max_retries + 1):
            self.stats.attempts += 1
            server_says = None
            try:
                async with semaphore:
                    return await call(**params)
            except openai.APIStatusError as e:
                if not retryable_status(e.status_code):
                    raise BackendError(
                        f"{what} at {cfg.base_url} failed with HTTP {e.status_code} (not retried): {e.message}"
                    ) from e
                reason, error = str(e.status_code), e
                server_says = retry_after(e.response.headers)
            except openai.APITimeoutError as e:
                reason, error = "timeout", e
            except openai.APIConnectionError as e:
                reason, error = "connection", e
            if attempt == cfg.max_retries:
                break
            delay = self._backoff.delay(attempt, server_says)
            self.stats.retries += 1
            self.stats.retries_by_reason[reason] += 1
            self.stats.retry_wait_s += delay
            await asyncio.sleep(delay)
        hint = (
            " Is the server running? Start one with `r3forge serve llm --model <model>` or "
            "`launch/serve_vllm.sh <model>`."
            if reason in ("connection", "timeout")
            else ""
        )
        raise BackendError(
            f"{what} at {cfg.base_url} failed after {cfg.max_retries + 1} attempts in "
            f"{time.monotonic() - start:.1f}s; last error ({reason}): {error!r}.{hint}"
        ) from error


def _key(token: str) -> TokenKey:
    """'token_id:123' (vLLM's return_tokens_as_token_ids) -> 123; other token strings unchanged."""
    m = _TOKEN_ID.match(token)
    return int(m[1]) if m else token


def _best(alternatives: dict[TokenKey, float], k: int) -> dict[TokenKey, float]:
    return dict(sorted(alternatives.items(), key=lambda kv: -kv[1])[:k])


def _ids(server_ids: list[int] | None, keys: list[TokenKey]) -> list[int]:
    if server_ids is not None:
        return list(server_ids)
    return list(keys) if keys and all(isinstance(key, int) for key in keys) else []  # type: ignore[arg-type]


def _usage(response) -> Usage:
    u = response.usage
    return Usage(u.prompt_tokens, u.completion_tokens) if u is not None else Usage()


def _extra(obj) -> dict:
    return obj.model_extra or {}


def _parse_chat(response, request: GenerationRequest) -> GenerationResult:
    choices = []
    for c in sorted(response.choices, key=lambda c: c.index):
        message = _extra(c.message)
        reasoning = message.get("reasoning") or message.get("reasoning_content")
        text = c.message.content or ""
        if reasoning is None:
            reasoning, text = split_reasoning(text)
        entries = c.logprobs.content if c.logprobs is not None and c.logprobs.content else []
        keys = [_key(e.token) for e in entries]
        top = [
            _best({_key(t.token): t.logprob for t in e.top_logprobs}, request.top_logprobs) for e in entries
        ]
        logprobs = [e.logprob for e in entries]
        ids = _ids(_extra(c).get("token_ids"), keys)
        choices.append(Choice(text, ids, logprobs, top, c.finish_reason or "", reasoning))
    prompt_ids = _extra(response).get("prompt_token_ids")
    return GenerationResult(choices, _usage(response), prompt_ids, "openai-http", {"id": response.id})


def _parse_completion(response, request: GenerationRequest) -> GenerationResult:
    choices = []
    for c in sorted(response.choices, key=lambda c: c.index):
        reasoning, text = split_reasoning(c.text)
        lp = c.logprobs
        keys = [_key(t) for t in lp.tokens or []] if lp is not None else []
        logprobs = list(lp.token_logprobs or []) if lp is not None else []
        raw_top = (lp.top_logprobs or []) if lp is not None else []
        top = [_best({_key(t): v for t, v in (d or {}).items()}, request.top_logprobs) for d in raw_top]
        ids = _ids(_extra(c).get("token_ids"), keys)
        choices.append(Choice(text, ids, logprobs, top, c.finish_reason or "", reasoning))
    prompt_ids = _extra(response.choices[0]).get("prompt_token_ids") if response.choices else None
    return GenerationResult(choices, _usage(response), prompt_ids, "openai-http", {"id": response.id})
