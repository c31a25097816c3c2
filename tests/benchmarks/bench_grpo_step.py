"""GRPO step time with multi-turn search rollouts vs TRL's single-turn GRPO at the same generated tokens,
and the retriever/reranker calls that de-duplicating a turn's queries saves.

    .venv/bin/python tests/benchmarks/bench_grpo_step.py --model runs/sft/agent_warmstart_cpu/final \\
        --questions data/synth_world/questions.jsonl --index indexes/world-bm25 [--steps 6]
        [--reranker_url http://127.0.0.1:8000/v1 --reranker_model NAME]

Baseline ("TRL single-turn"): `GRPOTrainer` without a rollout_func, the same model, prompts, G, batch and
optimizer, each completion forced to the multi-turn arm's mean number of policy-generated tokens
(min_new_tokens = max_completion_length = that mean), so both arms sample the same number of tokens per
step. Multi-turn ("agent"): the recipe's `AgentRollout` (search -> retriever [-> verbal reranker] ->
observation, env_mask). Reported: seconds per step of each (the first step is warm-up and left out),
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

from r3forge.agent.data import load_rows
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
                      **kw)  # fmt: skip


def run(trainer: GRPOTrainer) -> tuple[float, list[dict]]:
    timer = StepTimer()
    trainer.add_callback(timer)
    timer.last = time.perf_counter()
    trainer.train()
    steps = timer.times[1:]  # the first step is warm-up
    return sum(steps) / len(steps), [r for r in trainer.state.log_history if "reward" in r]


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
    rows = load_rows(a.questions, "train", 0.2, "verbal" if a.reranker_url else "raw", limit=64, example=True)
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
        agent_s, agent_logs = run(agent)
        generated = sum(r["completions/mean_length"] for r in agent_logs[1:]) / len(
            agent_logs[1:]
        )  # policy tokens
        counters = env.counters.as_dict()
        length = max(1, round(generated))
        set_seed(0)
        single = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=[answer_reward],
                             args=common_args(Path(tmp) / "single", a.steps, length,
                                              generation_kwargs={"min_new_tokens": length}),
                             train_dataset=data, processing_class=tok)  # fmt: skip
        single_s, single_logs = run(single)
        single_tokens = sum(r["completions/mean_length"] for r in single_logs[1:]) / len(single_logs[1:])
    per_token_ratio = (agent_s / generated) / (single_s / single_tokens)
    queries, unique = counters["queries"], counters["unique_queries"]
    print(json.dumps({
        "steps_timed": a.steps - 1, "rollouts_per_step": 8,
        "agent_s_per_step": round(agent_s, 2), "agent_generated_tokens_per_rollout": round(generated, 1),
        "single_turn_s_per_step": round(single_s, 2), "single_turn_tokens_per_rollout": round(single_tokens, 1),
        "ratio_s_per_generated_token_agent_vs_single_turn": round(per_token_ratio, 3),
        "queries": queries, "unique_queries": unique,
        "dedup_saved_share": round(1 - unique / queries, 3) if queries else None,
        "reranker_pairs": counters["reranker_pairs"],
        "reranker_pairs_without_dedup": counters["reranker_pairs_requested"] if a.reranker_url else None,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
