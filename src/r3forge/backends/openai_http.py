"""OpenAI-compatible HTTP backend (`openai.AsyncOpenAI`): vLLM's server and hosted APIs.

* Chat requests go to `/v1/chat/completions`, raw prompts to `/v1/completions`.
* Bounded concurrency (a semaphore, released while a request waits to retry).
* Retries with exponential backoff and jitter on 408/409/429/5xx, timeouts, connection errors (resets,
  refused) and bad responses (a truncated or malformed body, JSON that is not a completion, a completion
  without the logprobs asked for); a `Retry-After` / `retry-after-ms` header is honoured (capped). Other
  4xx fail the batch at once. A request still failing after the retry budget fails alone: `generate`
  raises `PartialFailure` with the other requests' results and that one's `RequestFailed` (a reason code:
  `bad_response`, `timeout`, `connection`, `rate_limited`, `http_<status>`; what happened, where).
* Usage accounting and fault counters in `backend.stats`; `backend.faults` sums them up for run records.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from r3forge.backends.base import (
    BackendError,
    Choice,
    GenerationRequest,
    GenerationResult,
    PartialFailure,
    RequestFailed,
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
    # by cause: the HTTP status ("429", "500", ...), "timeout", "connection", "bad_response"
    retries_by_reason: Counter = field(default_factory=Counter)
    retry_wait_s: float = 0.0  # summed backoff sleeps
    timeouts: int = 0  # calls that timed out (retried or not)
    failures: Counter = field(default_factory=Counter)  # requests given up, by reason code (`failure_code`)
    usage: Usage = field(default_factory=Usage)


class OpenAIHTTPBackend:
    """`GenerationBackend` over an OpenAI-compatible server. `await agenerate(...)` inside an event loop."""

    name = "openai-http"

    def __init__(self, config: OpenAIHTTPConfig | None = None):
        self.config = config or OpenAIHTTPConfig()
        self.stats = HTTPStats()
        cfg = self.config
        self._backoff = Backoff(
            cfg.max_retries, cfg.backoff_base_s, cfg.backoff_max_s, cfg.max_retry_after_s, cfg.jitter_seed
        )
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

    @property
    def faults(self) -> dict[str, Any]:
        """What went wrong so far, as run records keep it: retries by cause (the HTTP status, `timeout`,
        `connection`, `bad_response`), timed-out calls and requests given up (by reason code)."""
        s = self.stats
        return {
            "attempts": s.attempts,
            "retries": s.retries,
            "retries_by_cause": dict(sorted(s.retries_by_reason.items())),
            "timeouts": s.timeouts,
            "failed_requests": dict(sorted(s.failures.items())),
        }

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
                results = list(await asyncio.gather(*tasks))
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
        if any(isinstance(r, RequestFailed) for r in results):
            raise PartialFailure(results)
        return results

    async def _first_model(self, client: openai.AsyncOpenAI) -> str:
        names = await self._with_retries(
            client.models.list, {}, asyncio.Semaphore(1), "GET /models", lambda ms: [m.id for m in ms.data]
        )
        if not names:
            raise BackendError(f"{self.config.base_url}/models lists no model; set `model` explicitly")
        return names[0]

    async def _one(
        self, client: openai.AsyncOpenAI, semaphore: asyncio.Semaphore, request: GenerationRequest
    ) -> GenerationResult | RequestFailed:
        if request.is_chat:
            create, what, parse = client.chat.completions.create, "POST /chat/completions", _parse_chat
        else:
            create, what, parse = client.completions.create, "POST /completions", _parse_completion
        try:
            result = await self._with_retries(
                create, self._params(request), semaphore, what, lambda response: parse(response, request)
            )
        except RequestFailed as e:
            return e
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

    async def _with_retries(
        self, call, params: dict, semaphore: asyncio.Semaphore, what: str, parse: Callable[[Any], Any]
    ) -> Any:
        """`parse(await call(**params))`, retried; `RequestFailed` after the retry budget, `BackendError` at
        once on a status that is not worth another try."""
        cfg, start = self.config, time.monotonic()
        for attempt in range(cfg.max_retries + 1):
            self.stats.attempts += 1
            server_says = None
            try:
                async with semaphore:
                    response = await call(**params)
                return _checked(parse, response)
            except openai.APIStatusError as e:
                if not retryable_status(e.status_code):
                    raise BackendError(
                        f"{what} at {cfg.base_url} failed with HTTP {e.status_code} (not retried): {e.message}"
                    ) from e
                reason, error = str(e.status_code), e
                server_says = retry_after(e.response.headers)
            except openai.APITimeoutError as e:
                self.stats.timeouts += 1
                reason, error = "timeout", e
            except openai.APIConnectionError as e:
                reason, error = "connection", e
            except (openai.APIResponseValidationError, ValueError) as e:  # ValueError: JSON, _BadResponse
                reason, error = "bad_response", e
            if attempt == cfg.max_retries:
                break
            delay = self._backoff.delay(attempt, server_says)
            self.stats.retries += 1
            self.stats.retries_by_reason[reason] += 1
            self.stats.retry_wait_s += delay
            await asyncio.sleep(delay)
        code = failure_code(reason)
        self.stats.failures[code] += 1
        hint = (
            " Is the server running? Start one with `r3forge serve llm --model <model>` or "
            "`launch/serve_vllm.sh <model>`."
            if reason in ("connection", "timeout")
            else ""
        )
        raise RequestFailed(
            code,
            f"{what} at {cfg.base_url} failed after {cfg.max_retries + 1} attempts in "
            f"{time.monotonic() - start:.1f}s; last error ({reason}): {error!r}.{hint}",
        ) from error


class _BadResponse(ValueError):
    """A response that is not the completion asked for (retried like a 5xx)."""


def _checked(parse: Callable[[Any], Any], response: Any) -> Any:
    """`parse(response)`; a response of the wrong shape (a field missing or of the wrong type, e.g. `{"oops":
    true}`, whose SDK object has no choices) raises `_BadResponse` naming what was wrong."""
    try:
        return parse(response)
    except (ValueError, TypeError, AttributeError, KeyError, IndexError) as e:
        raise _BadResponse(f"not a completion: {e}; body: {str(response)[:200]}") from e


def failure_code(reason: str) -> str:
    """A retry cause as the reason code of a request given up.

    >>> [failure_code(r) for r in ("429", "503", "timeout", "bad_response")]
    ['rate_limited', 'http_503', 'timeout', 'bad_response']
    """
    if reason == "429":
        return "rate_limited"
    return f"http_{reason}" if reason.isdigit() else reason


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


def _choices(response, request: GenerationRequest) -> list:
    """The response's choices in index order; `_BadResponse` unless there are as many as were asked for."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or len(choices) != request.distinct_samples:
        got = len(choices) if isinstance(choices, list) else repr(choices)
        raise _BadResponse(f"{request.distinct_samples} choice(s) asked for, got {got}")
    return sorted(choices, key=lambda c: c.index)


def _parse_chat(response, request: GenerationRequest) -> GenerationResult:
    choices = []
    for c in _choices(response, request):
        if c.message is None:
            raise _BadResponse("a choice without a message")
        message = _extra(c.message)
        reasoning = message.get("reasoning") or message.get("reasoning_content")
        if not isinstance(c.message.content, str) and reasoning is None and not c.message.refusal:
            raise _BadResponse("a message without content")
        if request.top_logprobs and (c.logprobs is None or c.logprobs.content is None):
            raise _BadResponse(f"no logprobs, though top_logprobs={request.top_logprobs} was asked for")
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
    return GenerationResult(
        choices, _usage(response), prompt_ids, "openai-http", {"id": getattr(response, "id", None)}
    )


def _parse_completion(response, request: GenerationRequest) -> GenerationResult:
    choices = []
    for c in _choices(response, request):
        if not isinstance(c.text, str):
            raise _BadResponse("a choice without text")
        if request.top_logprobs and c.logprobs is None:
            raise _BadResponse(f"no logprobs, though top_logprobs={request.top_logprobs} was asked for")
        reasoning, text = split_reasoning(c.text)
        lp = c.logprobs
        keys = [_key(t) for t in lp.tokens or []] if lp is not None else []
        logprobs = list(lp.token_logprobs or []) if lp is not None else []
        raw_top = (lp.top_logprobs or []) if lp is not None else []
        top = [_best({_key(t): v for t, v in (d or {}).items()}, request.top_logprobs) for d in raw_top]
        ids = _ids(_extra(c).get("token_ids"), keys)
        choices.append(Choice(text, ids, logprobs, top, c.finish_reason or "", reasoning))
    prompt_ids = _extra(response.choices[0]).get("prompt_token_ids") if response.choices else None
    return GenerationResult(
        choices, _usage(response), prompt_ids, "openai-http", {"id": getattr(response, "id", None)}
    )
