"""Open any LLM a job uses, in one place: one config (`LLMConfig`), one context manager (`open_llm`).

Every role opens its model here: the annotation teacher and judge, the search environment's reranker, the
closed-book filter's and `eval rag`'s generator, QREAM's rewriter, reader and judges.

    with open_llm(LLMConfig(backend="openai", model="openai/gpt-oss-120b",
                            base_url="http://gpu-node:8000/v1")) as teacher:
        run_step(step, items, teacher.backend, engine)

`backend`: `hf` (transformers in this process), `openai` (any OpenAI-compatible server: vLLM, SGLang, a
hosted API) or `vllm` (vLLM's offline engine in this process). With `serve: true` the job starts
`vllm serve` of `model` on a free loopback port, talks to it over HTTP and stops it when the job ends (the
CPU recipes do this; on a cluster run `launch/serve_vllm.sh` once and point `base_url` at it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from r3forge.backends.hf_local import HFLocalBackend, HFLocalConfig
from r3forge.backends.openai_http import OpenAIHTTPBackend, OpenAIHTTPConfig
from r3forge.backends.vllm_server import ServeLLMConfig, VLLMServer
from r3forge.errors import ConfigError
from r3forge.identity import model_identity


@dataclass
class LLMConfig:
    backend: Literal["hf", "openai", "vllm"] = field(
        default="hf",
        metadata={
            "help": "hf: transformers here; openai: an OpenAI-compatible server; vllm: offline engine."
        },
    )
    model: str = field(
        default="smollm2-135m-instruct",
        metadata={
            "help": "The LLM (annotate: the teacher; eval rag: the generator): embedded name, folder or Hub id "
            "(openai: the served name).",
            "model": ("backend",),
            "model_serve": "serve",
        },
    )
    base_url: str = field(default="http://127.0.0.1:8000/v1", metadata={"help": "openai backend: API root."})
    api_key: str = field(
        default="", metadata={"help": "openai backend: API key; empty: $OPENAI_API_KEY or 'EMPTY'."}
    )
    tokenizer: str = field(
        default="",
        metadata={
            "help": "openai backend: tokenizer to read token ids (score token, prefill); empty: none.",
            "model": (),
        },
    )
    device: str = field(default="cpu", metadata={"help": "hf backend: torch device."})
    request_timeout_s: float = field(default=300.0, metadata={"help": "openai backend: timeout of one call."})
    max_concurrency: int = field(
        default=64,
        metadata={"help": "openai backend: requests in flight per batch (in all: x the job's concurrency)."},
    )
    serve: bool = field(
        default=False,
        metadata={"help": "Start `vllm serve` of `model` on a free loopback port for this job (openai)."},
    )
    serve_max_model_len: int = field(
        default=2048,
        metadata={"help": "serve: context length of the started server; vllm: of the offline engine."},
    )
    serve_log: str = field(default="", metadata={"help": "serve: server log file; empty: a temporary file."})
    gpu_memory_utilization: float = field(
        default=0.0,
        metadata={
            "help": "vllm / serve on a GPU: share of GPU memory the model may take (0: vLLM's default)."
        },
    )
    max_logprobs: int = field(
        default=20,
        metadata={
            "help": "The largest top_logprobs a request may ask for (IGP's K needs >= K): vllm engine and serve "
            "start with it; openai: the server's --max-logprobs (hosted APIs: 20)."
        },
    )

    def __post_init__(self) -> None:
        if self.serve and self.backend != "openai":
            raise ConfigError(f"serve: true needs backend: openai (got backend: {self.backend})")


@dataclass
class LLM:
    """An open model: the backend, the tokenizer (or None) and the model id recorded in every record."""

    backend: Any
    tokenizer: Any
    model_id: str  # llm_identity(config): a local folder by its content, a Hub id @revision


def llm_identity(config: LLMConfig) -> str:
    """What records, cache keys and fingerprints name this model by (`r3forge.identity.model_identity`): a
    local folder by its content, so two checkpoints never share cached results; a name the openai backend
    sends to a server that is not started here, as given."""
    return model_identity(config.model, served=config.backend == "openai" and not config.serve)


def load_tokenizer(name: str) -> Any:
    from transformers import AutoTokenizer  # torch + transformers: only when a tokenizer is asked for

    from r3forge.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(name))


@contextmanager
def open_llm(config: LLMConfig, seed: int | None = None) -> Iterator[LLM]:
    """Build the backend (starting a vLLM server first with `serve`), yield it, close everything. `seed`:
    the vLLM engine's sampling seed (a sampled policy's), else the engine default."""
    with ExitStack() as stack:
        tokenizer, model_id = None, llm_identity(config)
        if config.backend == "hf":
            backend = HFLocalBackend.from_config(HFLocalConfig(model=config.model, device=config.device))
            tokenizer = backend.tokenizer
        elif config.backend == "vllm":
            from r3forge.backends.vllm_engine import (  # imports vllm (seconds)
                VLLMEngineBackend,
                VLLMEngineConfig,
            )

            share = (
                {"gpu_memory_utilization": config.gpu_memory_utilization}
                if config.gpu_memory_utilization
                else {}
            )
            if seed is not None:
                share["seed"] = seed
            backend = VLLMEngineBackend(
                VLLMEngineConfig(
                    model=config.model,
                    max_logprobs=config.max_logprobs,
                    max_model_len=config.serve_max_model_len,
                    **share,
                )
            )
            tokenizer = load_tokenizer(config.tokenizer or config.model)
        else:
            base_url = config.base_url
            if config.serve:
                serve = ServeLLMConfig(
                    model=config.model,
                    served_model_name=served_name(config.model),
                    port=0,
                    max_model_len=config.serve_max_model_len,
                    log_file=config.serve_log,
                    max_logprobs=config.max_logprobs,
                    gpu_memory_utilization=config.gpu_memory_utilization,
                )
                base_url = stack.enter_context(VLLMServer(serve)).base_url
            backend = OpenAIHTTPBackend(
                OpenAIHTTPConfig(
                    base_url=base_url,
                    model=served_name(config.model) if config.serve else config.model,
                    api_key=config.api_key,
                    request_timeout_s=config.request_timeout_s,
                    max_concurrency=config.max_concurrency,
                    max_top_logprobs=config.max_logprobs,
                )
            )
            tokenizer = load_tokenizer(config.tokenizer) if config.tokenizer else None
        stack.callback(backend.close)
        yield LLM(backend, tokenizer, model_id)


def served_name(model: str) -> str:
    """The name a server started here serves `model` under: a local folder by its name (its path differs
    between machines), anything else as given.

    >>> served_name("openai/gpt-oss-120b")
    'openai/gpt-oss-120b'
    """
    return os.path.basename(os.path.normpath(model)) if os.path.isdir(model) else model
