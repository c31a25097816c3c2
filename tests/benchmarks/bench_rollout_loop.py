"""Rollout-phase throughput of the agent loops on one vLLM engine, against the same engine generating the same
number of tokens single-turn (the baseline), in one process.

    .venv/bin/python tests/benchmarks/bench_rollout_loop.py --model runs/sft/agent_warmstart_cpu/final \\
        --questions data/synth_world/questions.jsonl --index indexes/world-bm25 [--prompts 32] [--repeats 2]
        [--env_delay_s 0.0] [--beside nothing] [--out FILE]

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
left out. The result file (`--out`, default `tests/benchmarks/results/rollout_loop/<cpu>_<bf16 units>.json`, one
per CPU kind) holds the figures (`arms`: seconds, policy tokens, tokens/s and the ratio to single-turn of each;
the environment's seconds and the async seconds hidden behind generation), the table `arms` it prints, and the
provenance (result_file.py); `--beside` says what shared the cores.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from render_tables import markdown_table
from result_file import NOT_RECORDED, cpu_kind, write_result
from transformers import AutoTokenizer

from r3forge.agent.async_rollout import VLLMStepPolicy, own_pace_rollouts
from r3forge.agent.data import load_agent_rows
from r3forge.agent.env import EnvConfig, SearchEnv
from r3forge.agent.rollout import RolloutConfig, VLLMPolicy, encode_prompt, lockstep_rollouts
from r3forge.backends.vllm_engine import VLLMEngineBackend, VLLMEngineConfig
from r3forge.models import resolve_model
from r3forge.retrieval import load_retriever

RESULTS = Path(__file__).parent / "results" / "rollout_loop"


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


def table(figures: dict) -> dict:
    """The table `arms`: per arm, policy tokens, seconds, tokens/s, the ratio to single-turn, and the
    environment's seconds (async: how many of them generation hid).

    >>> arms = {"sync": {"policy_tokens": 900, "seconds": 30.04, "tokens_per_s": 29.96, "ratio_vs_single_turn": 0.5},
    ...         "single-turn": {"policy_tokens": 900, "seconds": 15.0, "tokens_per_s": 60.0, "ratio_vs_single_turn": 1.0}}
    >>> table({"arms": arms, "env_s": {"sync": 4.25}, "async_s_hidden_behind_generation": 3.0})["rows"]
    [['sync', '900', '30.0', '30.0', '0.50x', '4.2', ''], ['single-turn', '900', '15.0', '60.0', '1.00x', '', '']]
    """
    rows = []
    for name, r in figures["arms"].items():
        env = figures["env_s"].get(name)
        hidden = figures["async_s_hidden_behind_generation"] if name == "async" else None
        rows.append([name, str(r["policy_tokens"]), f"{r['seconds']:.1f}", f"{r['tokens_per_s']:.1f}",
                     f"{r['ratio_vs_single_turn']:.2f}x", "" if env is None else f"{env:.1f}",
                     "" if hidden is None else f"{hidden:.1f}"])  # fmt: skip
    columns = ["arm", "policy tokens", "s", "tokens/s", "vs single-turn", "environment s",
               "environment s hidden behind generation (single-turn s + env s - async s)"]  # fmt: skip
    return {"columns": columns, "align": "lrrrrrr", "rows": rows}


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
    ap.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    ap.add_argument("--out", default=None, help="result file (default: results/rollout_loop/<cpu kind>.json)")
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
    figures = {"model": a.model, "questions": a.prompts, "generations": a.generations, "rollouts": len(prompts),
               "repeats_timed": a.repeats - 1, "env_delay_s (stand-in for a remote reranker's latency)": a.env_delay_s,
               "max_turns": a.max_turns, "max_turn_tokens": a.max_turn_tokens,
               "max_completion_tokens": a.max_completion_tokens, "baseline": "single-turn",
               "arms": {k: {"seconds": s, "policy_tokens": n, "tokens_per_s": rate[k],
                            "ratio_vs_single_turn": rate[k] / rate["single-turn"]} for k, (s, n) in totals.items()},
               "env_s": env_s, "async_s_hidden_behind_generation": overlap}  # fmt: skip
    print("\n" + "\n".join(markdown_table(table(figures))))
    out = Path(a.out) if a.out else RESULTS / f"{cpu_kind()}.json"
    write_result(out, figures, {"arms": table(figures)}, beside=a.beside)
    print(f"\nresult: {out}")


if __name__ == "__main__":
    main()
