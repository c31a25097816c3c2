"""Rollout-phase throughput of the agent loops on one vLLM engine, against the same engine generating the same
number of tokens single-turn (the baseline), in one process.

    .venv/bin/python tests/benchmarks/bench_rollout_loop.py --model runs/sft/agent_warmstart_cpu/final \\
        --questions data/synth_world/questions.jsonl --index indexes/world-bm25 [--prompts 32] [--repeats 2]
        [--env_delay_s 0.0]

Arms, each over the same prompts (G copies of each question, the recipe's prompt), sampled at temperature 1:
- "sync": `lockstep_rollouts` with `VLLMPolicy` (every rollout takes each turn together; one `generate` call per
  turn, then one environment call);
- "async": `own_pace_rollouts` with `VLLMStepPolicy` (continuous batching, prefix caching; the environment in
  a worker thread while generation goes on);
- "single-turn" (baseline): the same prompts, each forced to generate exactly the number of policy tokens its
  async rollout generated (min_tokens = max_tokens, EOS ignored), in one `generate` call.
Printed: generated (policy) tokens per second of each arm and the ratios to the baseline (goal for async:
>= 0.8), the environment's seconds and how much of them overlapped with generation (async), and the sync
loop's ratio for before/after. `--env_delay_s` adds a fixed delay to every environment call (a stand-in for
a remote reranker's latency, named as such in the output). The first repeat warms the engine up and is
left out.
"""

from __future__ import annotations

import argparse
import time

from transformers import AutoTokenizer

from r3forge.agent.async_rollout import VLLMStepPolicy, own_pace_rollouts
from r3forge.agent.data import load_agent_rows
from r3forge.agent.env import EnvConfig, SearchEnv
from r3forge.agent.rollout import RolloutConfig, VLLMPolicy, encode_prompt, lockstep_rollouts
from r3forge.backends.vllm_engine import VLLMEngineBackend, VLLMEngineConfig
from r3forge.models import resolve_model
from r3forge.retrieval import load_retriever


class DelayedEnv:
    """SearchEnv with a fixed delay per call: the latency of a remote reranker, without its compute."""

    def __init__(self, env: SearchEnv, delay: float):
        self.env, self.delay, self.seconds, self.spans = env, delay, 0.0, []

    def observe(self, queries):
        start = time.perf_counter()
        time.sleep(self.delay)
        out = self.env.observe(queries)
        end = time.perf_counter()
        self.seconds += end - start
        self.spans.append((start, end))
        return out


def policy_tokens(rollouts) -> list[int]:
    return [sum(r.env_mask) for r in rollouts]


def single_turn(llm, prompts: list[list[int]], counts: list[int]) -> float:
    from vllm import SamplingParams

    params = [SamplingParams(n=1, temperature=1.0, max_tokens=max(n, 1), min_tokens=max(n, 1), ignore_eos=True,
                             logprobs=0) for n in counts]  # fmt: skip
    start = time.perf_counter()
    llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--prompts", type=int, default=8, help="questions (each repeated --generations times)")
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3, help="the first is warm-up and left out")
    ap.add_argument("--env_delay_s", type=float, default=0.0)
    ap.add_argument("--max_turns", type=int, default=2)
    ap.add_argument("--max_turn_tokens", type=int, default=48)
    ap.add_argument("--max_completion_tokens", type=int, default=400)
    a = ap.parse_args()

    model = str(resolve_model(a.model))
    tok = AutoTokenizer.from_pretrained(model)
    rows = load_agent_rows(a.questions, "all", 0.0, "raw", limit=a.prompts)
    prompts = [encode_prompt(tok, r["prompt"]) for r in rows for _ in range(a.generations)]
    config = RolloutConfig(max_turns=a.max_turns, max_turn_tokens=a.max_turn_tokens, max_obs_tokens=160)
    base = SearchEnv(
        load_retriever(a.index), None, EnvConfig(observation="raw", num_shown=2, doc_max_words=30)
    )
    engine = VLLMEngineBackend(VLLMEngineConfig(model=model, max_model_len=2048, cpu_kvcache_gib=2))
    llm = engine.llm
    print(f"model {a.model}; {len(prompts)} rollouts ({a.prompts} questions x G={a.generations}); "
          f"env delay {a.env_delay_s} s per call (a stand-in for a remote reranker's latency)")  # fmt: skip
    totals = {"sync": [0.0, 0], "async": [0.0, 0], "single-turn": [0.0, 0]}
    env_s = {"sync": 0.0, "async": 0.0}
    overlap = 0.0
    try:
        for rep in range(a.repeats):
            env = DelayedEnv(base, a.env_delay_s)
            start = time.perf_counter()
            sync = lockstep_rollouts(
                prompts, VLLMPolicy(llm, tok.eos_token_id), env, tok, config, a.max_completion_tokens
            )
            t_sync, e_sync = time.perf_counter() - start, env.seconds

            env = DelayedEnv(base, a.env_delay_s)
            stepper = VLLMStepPolicy(VLLMPolicy(llm, tok.eos_token_id))
            start = time.perf_counter()
            rollouts = own_pace_rollouts(prompts, stepper, env, tok, config, a.max_completion_tokens)
            t_async, e_async = time.perf_counter() - start, env.seconds
            counts = policy_tokens(rollouts)
            t_single = single_turn(llm, prompts, counts)
            line = (f"repeat {rep}: sync {sum(policy_tokens(sync))} tok {t_sync:.1f} s (env {e_sync:.1f} s); "
                    f"async {sum(counts)} tok {t_async:.1f} s (env {e_async:.1f} s, {stepper.steps} engine steps); "
                    f"single-turn {sum(counts)} tok {t_single:.1f} s")  # fmt: skip
            print(line + (" [warm-up, left out]" if rep == 0 else ""), flush=True)
            if rep == 0:
                continue
            totals["sync"][0] += t_sync
            totals["sync"][1] += sum(policy_tokens(sync))
            totals["async"][0] += t_async
            totals["async"][1] += sum(counts)
            totals["single-turn"][0] += t_single
            totals["single-turn"][1] += sum(counts)
            env_s["sync"] += e_sync
            env_s["async"] += e_async
            # generation went on during the environment's calls if the async arm took less than the sum of the
            # single-turn time (its generation) and its environment time
            overlap += max(0.0, t_single + e_async - t_async)
    finally:
        engine.close()
    rate = {k: n / s for k, (s, n) in totals.items()}
    print("\n| arm | policy tokens | s | tokens/s | vs single-turn |\n|---|---:|---:|---:|---:|")
    for k, (s, n) in totals.items():
        print(f"| {k} | {n} | {s:.1f} | {rate[k]:.1f} | {rate[k] / rate['single-turn']:.2f}x |")
    print(f"\nenvironment seconds: sync {env_s['sync']:.1f}, async {env_s['async']:.1f}; async time hidden behind "
          f"generation (single-turn s + env s - async s): {overlap:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
