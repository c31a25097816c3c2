"""GRPO recipe for the search agent: TRL's `GRPOTrainer` with a multi-turn `rollout_func`.

    r3forge grpo --config configs/grpo/agent_world_cpu.yaml
    accelerate launch --config_file configs/accelerate/zero3.yaml -m r3forge.agent.grpo \\
        --config configs/grpo/agent_qwen2.5-3b.yaml

Each training batch's prompts are rolled out by `rollout.run_rollouts` (search -> retriever -> verbal
reranker -> <information> -> ... -> <answer>) and handed to TRL as prompt_ids, completion_ids, the sampling
logprobs and `env_mask` (1 = sampled by the policy). TRL multiplies its completion mask by `env_mask`, so
observation, reranker-comment and correction tokens contribute nothing to the loss, the KL or the entropy;
everything else (clipped objective, k3 KL to the reference, group-normalized advantages, logging,
accelerate / DeepSpeed) is TRL's own. Generation inside the rollout: transformers `generate` with the live
policy (CPU, or GPUs without vLLM), or TRL's colocated vLLM engine (`use_vllm: true, vllm_mode: colocate`;
TRL syncs its weights before each rollout).

Rewards: `reward.answer_reward` (EM + format, weight 1) and `reward.format_reward` (weight 0: logged only).
Logged per step besides TRL's metrics: agent/masked_fraction (completion tokens not sampled by the policy),
agent/searches, agent/invalid_turns, agent/truncated, agent/answered, agent/dedup_saved (share of the
turn's queries that dedup spared the retriever and reranker).
Run folder: run.json, config.yaml, metrics.jsonl, rollouts.jsonl, final/ (weights + tokenizer),
final_metrics.json (with the mean reward of the first and last 10 steps).
"""

from __future__ import annotations

import inspect
import json
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import datasets
import trl
from transformers import set_seed
from trl import GRPOConfig, GRPOTrainer, ModelConfig, get_peft_config
from trl.models import unwrap_model_for_generation

from r3forge.agent.config import GRPO_CONFIGS, PAPER_DEFAULTS, TRL_TESTED, AgentScriptArguments
from r3forge.agent.data import load_rows
from r3forge.agent.env import EnvConfig, SearchConfig, SearchEnv, open_env
from r3forge.agent.reward import answer_reward, format_reward
from r3forge.agent.rollout import HFPolicy, Rollout, RolloutConfig, VLLMPolicy, encode_prompt, run_rollouts
from r3forge.config import parse_config, save_config
from r3forge.errors import ConfigError
from r3forge.sft.recipe import load_model
from r3forge.sft.run import MetricsJSONL, prepare_output_dir, run_info, write_json


def rollout_row(r: Rollout, tokenizer: Any, step: int) -> dict[str, Any]:
    """What rollouts.jsonl keeps of one rollout."""
    return {"step": step, "completion": tokenizer.decode(r.completion_ids), "searches": r.searches,
            "finish": r.finish, "turns": r.turns, "invalid_turns": r.invalid_turns,
            "tokens": len(r.completion_ids), "policy_tokens": sum(r.env_mask)}  # fmt: skip


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

    def __init__(self, env: SearchEnv, tokenizer: Any, config: RolloutConfig, batch_size: int,
                 log_path: Path | None = None):  # fmt: skip
        self.env, self.tokenizer, self.config, self.batch_size = env, tokenizer, config, batch_size
        self.log_path = log_path

    def __call__(self, prompts: list[Any], trainer: GRPOTrainer) -> dict[str, list]:
        args = trainer.args
        ids = [encode_prompt(self.tokenizer, p) for p in prompts]
        before = self.env.counters.as_dict() | {"seconds": self.env.seconds}
        start = time.perf_counter()
        if args.use_vllm:
            if args.vllm_mode != "colocate":
                raise ConfigError("the agent recipe needs vllm_mode: colocate (its rollouts call the engine)")
            with awake(trainer.vllm_generation) as llm:
                policy = VLLMPolicy(llm, self.tokenizer.eos_token_id, args.temperature, args.top_p)
                rollouts = run_rollouts(
                    ids, policy, self.env, self.tokenizer, self.config, args.max_completion_length
                )
        else:
            with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                             gather_deepspeed3_params=args.ds3_gather_for_generation) as model:  # fmt: skip
                policy = HFPolicy(model, self.tokenizer, args.temperature, args.top_p, self.batch_size)
                rollouts = run_rollouts(
                    ids, policy, self.env, self.tokenizer, self.config, args.max_completion_length
                )
        self.log(trainer, rollouts, before, time.perf_counter() - start)
        return {
            "prompt_ids": [r.prompt_ids for r in rollouts],
            "completion_ids": [r.completion_ids for r in rollouts],
            "logprobs": [r.logprobs for r in rollouts],
            "env_mask": [r.env_mask for r in rollouts],
            "num_searches": [len(r.searches) for r in rollouts],
        }

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
        }
        for name, value in metrics.items():
            trainer._log_metric(name, value)  # averaged per logging step like TRL's own metrics
        if self.log_path is not None and trainer.accelerator.is_main_process:
            with open(self.log_path, "a", encoding="utf-8") as f:
                for r in rollouts:
                    f.write(json.dumps(rollout_row(r, self.tokenizer, trainer.state.global_step)) + "\n")


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
    return {"reward_first": sum(r["reward"] for r in first) / len(first),
            "reward_last": sum(r["reward"] for r in last) / len(last), "reward_window": window,
            "logged_steps": len(rows)}  # fmt: skip


def check_trl() -> None:
    """Fail before loading anything when the installed TRL lacks what the recipe calls."""
    missing = [what for what, ok in (
        ("GRPOTrainer(rollout_func=...)", "rollout_func" in inspect.signature(GRPOTrainer.__init__).parameters),
        ("GRPOTrainer._log_metric", callable(getattr(GRPOTrainer, "_log_metric", None))),
    ) if not ok]  # fmt: skip
    if missing:
        raise ConfigError(f"trl {trl.__version__} has no {', '.join(missing)}: the agent recipe runs on trl "
                          f"<= {TRL_TESTED} (pip install 'trl>=1.10,<={TRL_TESTED}.99')")  # fmt: skip


def main(script: AgentScriptArguments, search: SearchConfig, env_config: EnvConfig, rollout: RolloutConfig,
         model_args: ModelConfig, training: GRPOConfig) -> dict[str, Any]:  # fmt: skip
    """Train, save `final/` and the run files; returns the final metrics."""
    check_trl()
    resume = prepare_output_dir(training.output_dir, training.resume_from_checkpoint, script.overwrite)
    out = Path(training.output_dir)
    set_seed(training.seed)
    if training.max_completion_length is None:
        raise ConfigError("max_completion_length: set the token budget of a whole rollout")
    rows = load_rows(script.dataset, "train", script.heldout_fraction, env_config.observation,
                     script.max_train_questions, script.qa_format, script.example)  # fmt: skip
    train = datasets.Dataset.from_list(rows)

    base, model, tokenizer = load_model(model_args, training)
    if training.reward_weights is None:
        training.reward_weights = [1.0, 0.0]  # answer_reward trains; format_reward is logged only
    with ExitStack() as stack:
        env = open_env(stack, search, env_config)
        out.mkdir(parents=True, exist_ok=True)
        rollout_func = AgentRollout(env, tokenizer, rollout, script.policy_batch_size,
                                    out / "rollouts.jsonl" if script.save_rollouts else None)  # fmt: skip
        trainer = GRPOTrainer(model=model, reward_funcs=[answer_reward, format_reward], args=training,
                              train_dataset=train, processing_class=tokenizer,
                              peft_config=get_peft_config(model_args), rollout_func=rollout_func)  # fmt: skip
        if trainer.is_world_process_zero():
            save_config((script, search, env_config, rollout, model_args, training), out / "config.yaml")
            info = run_info("grpo", "agent", base, [script.dataset], bool(model_args.use_peft))
            write_json(out / "run.json", info)
        trainer.add_callback(MetricsJSONL(out / "metrics.jsonl"))
        result = trainer.train(resume_from_checkpoint=resume)
        metrics: dict[str, Any] = dict(result.metrics) | reward_summary(trainer.state.log_history)
        metrics["env"] = env.counters.as_dict()
    trainer.save_model(str(out / "final"))
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(str(out / "final"))
        write_json(out / "final_metrics.json", metrics)
        write_json(out / "run.json", info | {"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return metrics


def parse(argv: list[str], prog: str) -> tuple[Any, ...]:
    return parse_config(GRPO_CONFIGS, argv, prog=prog, defaults=PAPER_DEFAULTS)


def cli(argv: list[str] | None = None) -> int:
    main(*parse(sys.argv[1:] if argv is None else argv, "r3forge grpo"))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
