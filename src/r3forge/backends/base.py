"""One generation interface for every backend: requests in, choices with token-level logprobs out.

A backend is anything with `generate(requests) -> results` and `close()` (a `typing.Protocol`, no base
class). Every backend returns, per request and per choice: the final text (reasoning kept apart), the
generated token ids, each generated token's logprob and its top-k alternatives, the finish reason, and
token usage.

Logprobs are those of the *raw* next-token distribution (log_softmax of the model's logits before
temperature / top-p), the same on every backend: vLLM's default `logprobs_mode="raw_logprobs"`, and
transformers' `output_logits` on the local path. IGP computes entropy over the top-K of that distribution
renormalized, so K is bounded by what a backend can return: vLLM's `--max-logprobs` (default 20) and
hosted OpenAI-compatible APIs, which cap `top_logprobs` at 20 — K > 20 needs a self-hosted vLLM server
started with a larger `--max-logprobs`, the offline vLLM engine or the transformers backend.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# the backend errors live in the bottom layer (the synthesis engine catches them); re-exported here
from r3forge.errors import BackendError as BackendError
from r3forge.errors import PartialFailure as PartialFailure
from r3forge.errors import RequestFailed as RequestFailed

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": "..."}
TokenKey = int | str  # a vocabulary id, or the token's text when a server does not expose ids


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt (chat `messages` or a raw `prompt`, exactly one) and how to sample from it."""

    messages: tuple[Message, ...] | list[Message] | None = None
    prompt: str | None = None
    n: int = 1  # choices per request
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    max_tokens: int = 64
    stop: tuple[str, ...] = ()  # stop strings (not included in the returned text)
    seed: int | None = None
    top_logprobs: int = 0  # k alternatives returned per generated token (the chosen token's logprob always)

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError(
                "GenerationRequest needs exactly one of `messages` (chat) or `prompt` (raw text)"
            )
        if self.messages is not None:
            object.__setattr__(self, "messages", tuple(dict(m) for m in self.messages))
        object.__setattr__(self, "stop", tuple(self.stop))
        if self.n < 1 or self.max_tokens < 1 or self.top_logprobs < 0:
            raise ValueError(f"need n >= 1, max_tokens >= 1, top_logprobs >= 0; got {self}")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1; got {self}")

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    @property
    def distinct_samples(self) -> int:
        """Choices a backend must actually sample: greedy choices are identical, so 1 when greedy (vLLM
        rejects greedy n > 1); `with_n_choices` then copies that one choice n times."""
        return 1 if self.temperature == 0 else self.n

    def sampling_key(self) -> tuple:
        """Everything except the prompt: requests with equal keys can share one batched `generate` call."""
        return (
            self.n,
            self.temperature,
            self.top_p,
            self.max_tokens,
            self.stop,
            self.seed,
            self.top_logprobs,
        )


@dataclass
class Choice:
    """One sampled continuation. Lists are per generated token, in order ([T] each)."""

    text: str  # final text; reasoning (GPT-OSS analysis channel, <think>...</think>) removed
    token_ids: list[int]  # [T]; empty when an HTTP server does not expose ids
    logprobs: list[float]  # [T] logprob of each generated token under the raw distribution
    top_logprobs: list[dict[TokenKey, float]]  # [T] k best alternatives, best first ({} when k = 0)
    finish_reason: str  # "stop" (EOS or a stop string), "length", or what a server reports
    reasoning: str | None = None  # separate reasoning content, when the model/server produces one


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0  # summed over the n choices

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens


@dataclass
class GenerationResult:
    choices: list[Choice]  # n of them
    usage: Usage
    prompt_token_ids: list[int] | None = (
        None  # the prompt as the backend tokenized it (chat template applied)
    )
    backend: str = ""
    extra: dict = field(default_factory=dict)  # backend-specific details (e.g. the server's response id)


@runtime_checkable
class GenerationBackend(Protocol):
    """What training, annotation and IGP code depends on. Results come back in request order.

    A backend whose requests can fail one by one (HTTP) raises `PartialFailure` with the others' results."""

    name: str

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]: ...

    def close(self) -> None: ...


def with_n_choices(result: GenerationResult, n: int) -> GenerationResult:
    """A greedy result computed once, returned with its choice copied n times (usage counts all n)."""
    if n > 1 and len(result.choices) == 1:
        result.choices = [copy.deepcopy(result.choices[0]) for _ in range(n)]
        result.usage.completion_tokens *= n
    return result


# --- reasoning content ---------------------------------------------------------------------------------

# GPT-OSS "harmony" output, with special tokens kept ...
_HARMONY = re.compile(
    r"^(?:<\|start\|>assistant)?<\|channel\|>analysis<\|message\|>(?P<reasoning>.*?)<\|end\|>"
    r".*?<\|channel\|>final<\|message\|>(?P<final>.*?)(?:<\|return\|>|<\|end\|>)?$",
    re.DOTALL,
)
# ... and decoded with skip_special_tokens=True (vLLM's default without a reasoning parser)
_HARMONY_STRIPPED = re.compile(r"^analysis(?P<reasoning>.*?)assistantfinal(?P<final>.*)$", re.DOTALL)
# DeepSeek-R1 / Qwen3 style; the opening tag may sit in the prompt (chat template) and be absent here
_THINK = re.compile(r"^\s*(?:<think>)?(?P<reasoning>.*?)</think>(?P<final>.*)$", re.DOTALL)


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(reasoning, final text) of a model output; (None, text) when it carries no reasoning section.

    >>> split_reasoning("analysisThe user wants 2+2.assistantfinal4")
    ('The user wants 2+2.', '4')
    >>> split_reasoning("<think>easy</think> 4")
    ('easy', '4')
    >>> split_reasoning("Paris.")
    (None, 'Paris.')
    """
    for pattern in (_HARMONY, _HARMONY_STRIPPED, _THINK):
        if m := pattern.match(text):
            return m["reasoning"].strip(), m["final"].strip()
    return None, text


def truncate_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Text up to (excluding) the earliest stop string, and whether one occurred."""
    cut = min((i for s in stop if (i := text.find(s)) >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


# reading a choice's tokens and logprobs
def token_decoder(tokenizer: Any) -> Callable[[list[int]], str] | None:
    """`ids -> text` with `tokenizer` (special tokens skipped), or None without one."""
    if tokenizer is None:
        return None
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)


def p_yes(top: dict[Any, float], decode: Callable[[list[int]], str] | None) -> float | None:
    """P(yes) / (P(yes) + P(no)) from one position's top-k logprobs (token ids decoded with `decode`): a yes/no
    judgement's probability; None where neither word is in the top k.

    >>> round(p_yes({" Yes": math.log(0.6), "No": math.log(0.2), "maybe": math.log(0.2)}, None), 3)
    0.75
    >>> p_yes({"maybe": 0.0}, None) is None
    True
    """
    mass = {"yes": 0.0, "no": 0.0}
    for key, logprob in (top or {}).items():
        text = key if isinstance(key, str) else (decode([key]) if decode is not None else "")
        word = text.strip().strip("*").lower()
        if word in mass:
            mass[word] += math.exp(logprob)
    total = mass["yes"] + mass["no"]
    return None if total == 0 else mass["yes"] / total
