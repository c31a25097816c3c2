"""The GRPO agent recipe's configs: the script's data / retrieval / reranker arguments, the environment
(`EnvConfig`), the rollout budgets (`RolloutConfig`), TRL's `ModelConfig` and `GRPOConfig` (every
`TrainingArguments` field plus num_generations, epsilon, beta, temperature, max_completion_length, use_vllm,
vllm_mode, ...). One YAML sets fields of all five; unknown keys are errors.

Paper settings (Verbal-R3, after Search-R1) are the recipe's defaults where TRL's differ: G = 5 generations,
clip epsilon 0.2, KL beta 0.001 (TRL's k3 estimator, the low-variance one), temperature 1.0, learning rate
5e-7 with 10% warmup, group-normalized advantages (TRL's `scale_rewards: group`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig, ModelConfig

from r3forge.agent.env import EnvConfig, SearchConfig
from r3forge.agent.rollout import RolloutConfig
from r3forge.errors import ConfigError

PAPER_DEFAULTS = {
    "num_generations": 5,
    "epsilon": 0.2,
    "beta": 0.001,
    "temperature": 1.0,
    "learning_rate": 5e-7,
    "warmup_steps": 0.1,
}


@dataclass
class AgentScriptArguments:
    dataset: str = field(metadata={"help": "Training questions: any QA file `load_qa` reads (NQ, HotpotQA, the "
                                           "synthetic world, the output of `data filter-closed-book`)."})  # fmt: skip
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
    save_rollouts: bool = field(
        default=True, metadata={"help": "Append every rollout (text, searches, finish) to rollouts.jsonl."}
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
