"""GRPO step time with multi-turn search rollouts vs TRL's single-turn GRPO at the same generated tokens,
and the retriever/reranker calls that de-duplicating a turn's queries saves.

    .venv/bin/python tests/benchmarks/bench_grpo_step.py --model runs/sft/agent_warmstart_cpu/final \\
        --questions data/synth_world/questions.jsonl --index indexes/world-bm25 [--steps 6]
        [--reranker_url http://127.0.0.1:8000/v1 --reranker_model NAME]

Baseline ("TRL single-turn"): `GRPOTrainer` without a rollout_func, the same model, prompts, G, batch and
optimizer (gradient checkpointing off in both, as in the CPU recipe config), each completion forced to the
multi-turn arm's mean number of policy-generated tokens (min_new_tokens = max_completion_length = that
mean), so both arms sample the same number of tokens per step. Multi-turn ("agent"): the recipe's `AgentRollout` (search -> retriever [-> verbal reranker] ->
observation, env_mask). Reported: seconds per step of each (the first step is warm-up and left out), split
into generation + scoring (for the agent: rollout wall time, of which retrieval + reranking) and the
loss/backward/optimizer rest,
generated tokens per step, the ratio agent / single-turn of seconds per generated token (target <= 1.3),
and the share of queries, retrievals and reranker pairs de-duplication saved.
Without --reranker_url the observations are raw documents (no reranker cost in the agent arm).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import datasets
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback, set_seed
from trl import GRPOConfig, GRPOTrainer

from r3forge.agent.data import load_agent_rows
from r3forge.agent.env import EnvConfig, SearchConfig, open_env
from r3forge.agent.grpo import AgentRollout
from r3forge.agent.reward import answer_reward
from r3forge.agent.rollout import RolloutConfig
from r3forge.models import resolve_model


class StepTimer(TrainerCallback):
    def __init__(self) -> None:
        self.times: list[float] = []
        self.last = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        self.times.append(now - self.last)
        self.last = now


def common_args(out: Path, steps: int, completion: int, **kw) -> GRPOConfig:
    return GRPOConfig(output_dir=str(out), per_device_train_batch_size=8, num_generations=4, max_steps=steps,
                      max_completion_length=completion, learning_rate=1e-5, beta=0.001, temperature=1.0,
                      use_cpu=True, bf16=False, report_to="none", logging_steps=1, save_strategy="no", seed=0,
                      gradient_checkpointing=False, **kw)  # fmt: skip


def run(trainer: GRPOTrainer) -> tuple[float, float, list[dict]]:
    """Mean s/step, mean s/step inside `_generate_and_score_completions` (generation, rewards, reference
    logprobs; TRL's private method, timed by wrapping it), and the reward log rows; step 1 is left out."""
    timer = StepTimer()
    trainer.add_callback(timer)
    inner, generate_times = trainer._generate_and_score_completions, []

    def timed(*args, **kwargs):
        start = time.perf_counter()
        out = inner(*args, **kwargs)
        generate_times.append(time.perf_counter() - start)
        return out

    trainer._generate_and_score_completions = timed
    timer.last = time.perf_counter()
    trainer.train()
    steps, generate = timer.times[1:], generate_times[1:]  # the first step is warm-up
    logs = [r for r in trainer.state.log_history if "reward" in r]
    return sum(steps) / len(steps), sum(generate) / len(generate), logs


def mean(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--questions", required=True)
    p.add_argument("--index", required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--reranker_url", default="")
    p.add_argument("--reranker_model", default="")
    a = p.parse_args()
    path = resolve_model(a.model)
    rows = load_agent_rows(
        a.questions, "train", 0.2, "verbal" if a.reranker_url else "raw", limit=64, example=True
    )
    data = datasets.Dataset.from_list(rows)
    rollout_cfg = RolloutConfig(max_turns=2, max_turn_tokens=48, max_obs_tokens=160)
    env_cfg = EnvConfig(observation="verbal" if a.reranker_url else "raw", num_retrieve=3, num_shown=2,
                        doc_max_words=30)  # fmt: skip
    search = SearchConfig(index=a.index, reranker_base_url=a.reranker_url or "http://unused",
                          reranker_model=a.reranker_model or "unused", reranker_max_tokens=64)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        tok = AutoTokenizer.from_pretrained(path)
        set_seed(0)
        env = open_env(stack, search, env_cfg)
        agent = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=[answer_reward],
                            args=common_args(Path(tmp) / "agent", a.steps, 400), train_dataset=data,
                            processing_class=tok, rollout_func=AgentRollout(env, tok, rollout_cfg, 16))  # fmt: skip
        agent_s, agent_generate_s, agent_logs = run(agent)
        generated = mean(agent_logs[1:], "completions/mean_length")  # policy tokens
        counters = env.counters.as_dict()
        length = max(1, round(generated))
        set_seed(0)
        single = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=[answer_reward],
                             args=common_args(Path(tmp) / "single", a.steps, length,
                                              generation_kwargs={"min_new_tokens": length}),
                             train_dataset=data, processing_class=tok)  # fmt: skip
        single_s, single_generate_s, single_logs = run(single)
        single_tokens = mean(single_logs[1:], "completions/mean_length")
    per_token_ratio = (agent_s / generated) / (single_s / single_tokens)
    queries, unique = counters["queries"], counters["unique_queries"]
    print(json.dumps({
        "steps_timed": a.steps - 1, "rollouts_per_step": 8,
        "agent_s_per_step": round(agent_s, 2), "agent_generated_tokens_per_rollout": round(generated, 1),
        "agent_breakdown_s": {"rollout": round(mean(agent_logs[1:], "agent/rollout_s"), 2),
                              "of_which_env": round(mean(agent_logs[1:], "agent/env_s"), 2),
                              "generate_and_score": round(agent_generate_s, 2),
                              "loss_backward_optimizer": round(agent_s - agent_generate_s, 2)},
        "agent_tokens_per_rollout_incl_masked": round(generated / (1 - mean(agent_logs[1:], "agent/masked_fraction")), 1),
        "single_turn_s_per_step": round(single_s, 2), "single_turn_tokens_per_rollout": round(single_tokens, 1),
        "single_turn_breakdown_s": {"generate_and_score": round(single_generate_s, 2),
                                    "loss_backward_optimizer": round(single_s - single_generate_s, 2)},
        "ratio_s_per_generated_token_agent_vs_single_turn": round(per_token_ratio, 3),
        "queries": queries, "unique_queries": unique,
        "dedup_saved_share": round(1 - unique / queries, 3) if queries else None,
        "reranker_pairs": counters["reranker_pairs"],
        "reranker_pairs_without_dedup": counters["reranker_pairs_requested"] if a.reranker_url else None,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
