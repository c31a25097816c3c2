"""GRPO step time with multi-turn search rollouts vs TRL's single-turn GRPO at the same generated tokens,
and the retriever/reranker calls that de-duplicating a turn's queries saves.

    .venv/bin/python tests/benchmarks/bench_grpo_step.py --model runs/sft/agent_warmstart_cpu/final \\
        --questions data/synth_world/questions.jsonl --index indexes/world-bm25 [--steps 6]
        [--reranker_url http://127.0.0.1:8000/v1 --reranker_model NAME] [--rollout_engine vllm]
        [--single_turn_hf true] [--env_delay_s 0.5] [--doc_max_words 30] [--beside nothing] [--out FILE]

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

`--rollout_engine vllm` generates both arms on r3forge's own vLLM engine (`agent/policy_engine.py`, the
trainer's weights pushed before each step's rollouts, TRL's importance-sampling correction on): the agent
arm through the recipe's async loop, the single-turn arm through a rollout_func that samples each prompt's
completion in one `generate` call on the same engine (forced to the same length), i.e. TRL's single-turn
GRPO with its generation on that engine. `--single_turn_hf true` adds TRL's own single-turn arm
(transformers `generate`) as a third, for the ratio against the historical baseline. `--env_delay_s D`
adds D seconds to every environment call (a stand-in for a remote reranker's latency, named as such in the
output); with the vLLM engine the output then says how much of the environment's time the engine spent
stepping other rollouts (`env_overlapped_share`: 1.0 = all of it hidden behind generation).
`--doc_max_words W` (default 30, the CPU recipe's) sets how long each shown document is, and so how many
observation tokens the trainer's forward and backward carry besides the policy's own.

`--agent_steps padded,packed` (default both) runs the agent arm with TRL's padded training step
(`GRPOTrainer`) and with r3forge's packed, mask-aware one (`agent/packed.py: PackedGRPOTrainer`, the recipe's
default), each on its own engine from the same seed. Every arm reports a per-step profile (timed steps
only): tokens through the trainer's loss forward (padded `[B, P + C]` vs the real tokens), LM-head positions
(every completion token vs the policy's own), and seconds in the loss forward, the backward, TRL's fused LM
head (its forward and backward, inside the former two) and the optimizer step.

The result file (`--out`, default `tests/benchmarks/results/grpo_step/<cpu>_<bf16 units>.json`, one per CPU kind)
holds the figures (the keys this script always wrote: one object per arm, the ratios
`ratio_s_per_generated_token_agent_<kind>_vs_<single-turn arm>` and the de-duplication counters), the tables it
prints (`steps`: seconds per step, tokens and the ratio against each single-turn arm; `profile`: the per-step
profile; `dedup`: queries and reranker pairs), and the provenance (result_file.py); `--beside` says what shared
the cores.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack, closing
from pathlib import Path

import datasets
from render_tables import markdown_table
from result_file import NOT_RECORDED, cpu_kind, write_result
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback, set_seed
from trl import GRPOConfig, GRPOTrainer
from trl.kernels import ChunkedLogProbFunction

from r3forge.agent.data import load_agent_rows
from r3forge.agent.env import EnvConfig, SearchConfig, open_env
from r3forge.agent.grpo import AgentRollout
from r3forge.agent.packed import PackedGRPOTrainer
from r3forge.agent.policy_engine import PolicyEngine, take_trl_slot
from r3forge.agent.reward import answer_reward
from r3forge.agent.rollout import RolloutConfig, VLLMPolicy, encode_prompt
from r3forge.models import resolve_model
from r3forge.training.cpu import compact_cpu_lm_head, cpu_lm_head_tiles

RESULTS = Path(__file__).parent / "results" / "grpo_step"
SINGLE_TURN = ("single_turn", "single_turn_hf")  # the baselines' keys in the result
PROFILE = {"padded_tokens": "loss-forward tokens (padded)", "real_tokens": "real tokens",
           "completion_tokens": "LM-head positions (every completion token)", "policy_tokens": "policy tokens",
           "loss_forward": "loss forward s", "backward": "backward s", "lm_head": "LM head s",
           "optimizer": "optimizer s"}  # fmt: skip


class StepTimer(TrainerCallback):
    def __init__(self) -> None:
        self.times: list[float] = []
        self.last = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        self.times.append(now - self.last)
        self.last = now


class DelayedEnv:
    """The recipe's SearchEnv with a fixed delay per `observe` call (latency of a remote reranker, without
    its compute); the call spans are kept to measure their overlap with the engine's steps."""

    def __init__(self, env, delay: float):
        self.env, self.delay, self.spans = env, delay, []

    def __getattr__(self, name):  # counters, seconds, ...: the wrapped environment's
        return getattr(self.env, name)

    def observe(self, queries):
        start = time.perf_counter()
        time.sleep(self.delay)
        out = self.env.observe(queries)
        self.env.seconds += self.delay
        self.spans.append((start, time.perf_counter()))
        return out


def record_steps(engine: PolicyEngine) -> list[tuple[float, float]]:
    """Wrap the engine's `step` so that each call's span is recorded (the async loop calls it per batch)."""
    inner, spans = engine.llm.llm_engine.step, []

    def step(*args, **kwargs):
        start = time.perf_counter()
        out = inner(*args, **kwargs)
        spans.append((start, time.perf_counter()))
        return out

    engine.llm.llm_engine.step = step
    return spans


def overlap(env_spans: list[tuple[float, float]], gen_spans: list[tuple[float, float]]) -> float:
    """Share of the environment's seconds during which the engine was stepping."""
    total = sum(e - s for s, e in env_spans)
    hidden = sum(max(0.0, min(e, ge) - max(s, gs)) for s, e in env_spans for gs, ge in gen_spans)
    return hidden / total if total else 0.0


class SingleTurnOnEngine:
    """TRL's single-turn GRPO with its generation on the `PolicyEngine`: one `generate` call per step, every
    completion forced to `length` tokens, the sampling logprobs returned for TRL's correction."""

    def __init__(self, tok, length: int):
        self.tok, self.length = tok, length

    def __call__(self, prompts, trainer):
        from vllm import SamplingParams

        policy = VLLMPolicy(trainer.vllm_generation.llm, self.tok.eos_token_id)  # its turn(): ids, logprobs
        ids = [encode_prompt(self.tok, p) for p in prompts]
        params = SamplingParams(temperature=trainer.args.temperature, max_tokens=self.length,
                                min_tokens=self.length, ignore_eos=True, logprobs=0)  # fmt: skip
        outs = policy.llm.generate([{"prompt_token_ids": i} for i in ids], params, use_tqdm=False)
        turns = [policy.turn(o.outputs[0]) for o in outs]
        return {
            "prompt_ids": ids,
            "completion_ids": [t.ids for t in turns],
            "logprobs": [t.logprobs for t in turns],
        }


def on_engine(trainer: GRPOTrainer, stack: ExitStack, path: str) -> PolicyEngine:
    """The recipe's wiring of `rollout_engine: vllm` (recipes/grpo.py)."""
    engine = stack.enter_context(closing(PolicyEngine(trainer.model, path, 2048, 2, seed=0)))
    take_trl_slot(trainer, engine)
    return engine


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


class Profile(TrainerCallback):
    """Per training step: tokens and seconds of the trainer's own passes (after the rollouts and scoring).
    `loss_forward`: `_compute_loss` (the policy's forward and TRL's loss arithmetic); `backward`: the
    accelerator's backward; `lm_head`: TRL's fused head kernel, forward and backward (part of both);
    `optimizer`: from `on_pre_optimizer_step` to `on_optimizer_step`."""

    def __init__(self, trainer: GRPOTrainer) -> None:
        self.steps: list[dict[str, float]] = []
        self.now: dict[str, float] = defaultdict(float)
        self.in_step = False
        self.wrap(trainer, "_compute_loss", self.compute_loss)
        self.wrap(trainer.accelerator, "backward", self.timed("backward"))
        self.head = (ChunkedLogProbFunction.forward, ChunkedLogProbFunction.backward)
        ChunkedLogProbFunction.forward = staticmethod(self.timed("lm_head", self.head[0], only_in_step=True))
        ChunkedLogProbFunction.backward = staticmethod(self.timed("lm_head", self.head[1], only_in_step=True))
        trainer.add_callback(self)

    def close(self) -> None:
        ChunkedLogProbFunction.forward, ChunkedLogProbFunction.backward = map(staticmethod, self.head)

    @staticmethod
    def wrap(obj, name, make):
        setattr(obj, name, make(getattr(obj, name)))

    def timed(self, key, fn=None, only_in_step=False):
        def make(fn):
            def call(*args, **kwargs):
                start = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    if self.in_step or not only_in_step:
                        self.now[key] += time.perf_counter() - start

            return call

        return make(fn) if fn is not None else make

    def compute_loss(self, fn):
        def call(model, inputs):
            mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
            self.now["padded_tokens"] += inputs["prompt_ids"].numel() + inputs["completion_ids"].numel()
            self.now["real_tokens"] += float(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
            self.now["completion_tokens"] += float(inputs["completion_mask"].sum())
            self.now["policy_tokens"] += float(mask.sum())
            self.in_step = True
            start = time.perf_counter()
            try:
                return fn(model, inputs)
            finally:
                self.now["loss_forward"] += time.perf_counter() - start

        return call

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.in_step, self.opt_start = False, time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.now["optimizer"] += time.perf_counter() - self.opt_start

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(dict(self.now))
        self.now.clear()

    def summary(self) -> dict[str, float]:
        """Means over the timed steps (the first is warm-up)."""
        timed = self.steps[1:]
        return {k: round(sum(s.get(k, 0.0) for s in timed) / len(timed), 2) for k in timed[0]}


def mean(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def cell(value, spec: str = ".2f", suffix: str = "") -> str:
    """One figure as a table cell; "-" where it was not measured.

    >>> cell(1.2345), cell(0.5, ".3f", "x"), cell(None)
    ('1.23', '0.500x', '-')
    """
    return "-" if value is None else f"{value:{spec}}{suffix}"


def steps_table(out: dict) -> dict:
    """The table `steps`: per arm, seconds per step and its parts, tokens per rollout, and each agent arm's
    seconds per generated token as a ratio against each single-turn arm that ran.

    >>> out = {"agent_packed": {"s_per_step": 40.5, "generated_tokens_per_rollout": 60.25,
    ...        "tokens_per_rollout_incl_masked": 180.0, "breakdown_s": {"rollout": 20.0, "of_which_env": 1.5,
    ...        "generate_and_score": 25.0, "loss_backward_optimizer": 15.5}},
    ...        "single_turn": {"s_per_step": 20.0, "tokens_per_rollout": 60.0,
    ...        "breakdown_s": {"generate_and_score": 12.0, "loss_backward_optimizer": 8.0}},
    ...        "ratio_s_per_generated_token_agent_packed_vs_single_turn": 2.017}
    >>> t = steps_table(out)
    >>> t["columns"][-1], t["rows"][0][-1], t["rows"][1][-1], t["rows"][1][3]
    ('s / generated token vs single_turn', '2.017x', '1.000x', '-')
    """
    singles = [n for n in SINGLE_TURN if n in out]
    agents = [k for k in out if k.startswith("agent_")]
    first = out[agents[0]] if agents else {}
    extra = [k for k in ("env_overlapped_share", "sampling_logp_difference_mean") if k in first]
    rows = []
    for name in agents + singles:
        r, b = out[name], out[name]["breakdown_s"]
        tokens = r.get("generated_tokens_per_rollout", r.get("tokens_per_rollout"))
        row = [name, cell(r["s_per_step"]), cell(tokens, ".1f"), cell(r.get("tokens_per_rollout_incl_masked"), ".1f"),
               cell(b.get("rollout")), cell(b.get("of_which_env")), cell(b["generate_and_score"]),
               cell(b["loss_backward_optimizer"])]  # fmt: skip
        for single in singles:
            ratio = 1.0 if name == single else out.get(f"ratio_s_per_generated_token_{name}_vs_{single}")
            row.append(cell(ratio, ".3f", "x"))
        rows.append(row + [cell(r.get(k), ".3f" if k == "env_overlapped_share" else ".4f") for k in extra])
    columns = ["arm", "s/step", "generated tokens / rollout", "tokens / rollout incl. masked", "rollout s",
               "of which env s", "generate + score s", "loss + backward + optimizer s"]  # fmt: skip
    columns += [f"s / generated token vs {n}" for n in singles] + [k.replace("_", " ") for k in extra]
    return {"columns": columns, "align": "l" + "r" * (len(columns) - 1), "rows": rows}


def profile_table(out: dict) -> dict:
    """The table `profile`: per arm, the means per timed step of `Profile` (tokens, then seconds).

    >>> t = profile_table({"agent_packed": {"profile_per_step": {"padded_tokens": 2900.0, "loss_forward": 3.25}}})
    >>> t["rows"]
    [['agent_packed', '2900.0', '-', '-', '-', '3.25', '-', '-', '-']]
    """
    arms = [k for k in out if isinstance(out[k], dict) and "profile_per_step" in out[k]]
    rows = [[name] + [cell(out[name]["profile_per_step"].get(k), ".1f" if k.endswith("tokens") else ".2f")
                      for k in PROFILE] for name in arms]  # fmt: skip
    return {"columns": ["arm", *PROFILE.values()], "align": "l" + "r" * len(PROFILE), "rows": rows}


def dedup_table(out: dict) -> dict:
    """The table `dedup`: queries and reranker pairs, with and without de-duplicating a turn's queries.

    >>> dedup_table({"queries": 96, "unique_queries": 80, "dedup_saved_share": 0.167, "reranker_pairs": 0,
    ...              "reranker_pairs_without_dedup": None})["rows"]
    [['96', '80', '0.167', '0', '-']]
    """
    keys = (
        "queries",
        "unique_queries",
        "dedup_saved_share",
        "reranker_pairs",
        "reranker_pairs_without_dedup",
    )
    row = [cell(out[k], ".3f" if k == "dedup_saved_share" else "d") for k in keys]
    columns = ["queries", "unique queries", "share saved by de-duplication", "reranker pairs",
               "reranker pairs without de-duplication"]  # fmt: skip
    return {"columns": columns, "align": "rrrrr", "rows": [row]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--questions", required=True)
    p.add_argument("--index", required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--reranker_url", default="")
    p.add_argument("--reranker_model", default="")
    p.add_argument("--rollout_engine", choices=["trainer", "vllm"], default="trainer")
    p.add_argument("--single_turn_hf", choices=["true", "false"], default="false")
    p.add_argument("--env_delay_s", type=float, default=0.0)
    p.add_argument("--doc_max_words", type=int, default=30)
    p.add_argument("--agent_steps", default="padded,packed", help="comma-separated: padded (TRL), packed")
    p.add_argument("--out", default=None, help="result file (default: results/grpo_step/<cpu kind>.json)")
    p.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    a = p.parse_args()
    compact_cpu_lm_head()  # the recipe's CPU settings (AgentScriptArguments' defaults): the head scores only
    cpu_lm_head_tiles(512, 4096)  # labelled positions, in [512, 4096] tiles
    path = resolve_model(a.model)
    rows = load_agent_rows(
        a.questions, "train", 0.2, "verbal" if a.reranker_url else "raw", limit=64, example=True
    )
    data = datasets.Dataset.from_list(rows)
    rollout_cfg = RolloutConfig(max_turns=2, max_turn_tokens=48, max_obs_tokens=160)
    env_cfg = EnvConfig(observation="verbal" if a.reranker_url else "raw", num_retrieve=3, num_shown=2,
                        doc_max_words=a.doc_max_words)  # fmt: skip
    search = SearchConfig(index=a.index, reranker_base_url=a.reranker_url or "http://unused",
                          reranker_model=a.reranker_model or "unused", reranker_max_tokens=64)  # fmt: skip
    vllm = a.rollout_engine == "vllm"
    out: dict = {"rollout_engine": a.rollout_engine, "steps_timed": a.steps - 1, "rollouts_per_step": 8,
                 "env_delay_s (stand-in for a remote reranker's latency)": a.env_delay_s,
                 "doc_max_words": a.doc_max_words}  # fmt: skip
    agents: dict[str, tuple[float, float]] = {}  # kind -> (s / step, policy tokens / rollout)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        tok = AutoTokenizer.from_pretrained(path)
        set_seed(0)
        env = DelayedEnv(open_env(stack, search, env_cfg), a.env_delay_s)
        for kind in a.agent_steps.split(","):
            set_seed(0)
            trainer_cls = PackedGRPOTrainer if kind == "packed" else GRPOTrainer
            agent = trainer_cls(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=[answer_reward],
                                args=common_args(Path(tmp) / f"agent_{kind}", a.steps, 400), train_dataset=data,
                                processing_class=tok, rollout_func=AgentRollout(env, tok, rollout_cfg, 16))  # fmt: skip
            profile = Profile(agent)
            with ExitStack() as arm:  # the arm's engine is closed before the next arm starts its own
                steps = record_steps(on_engine(agent, arm, path)) if vllm else []
                env.spans.clear()
                agent_s, agent_generate_s, agent_logs = run(agent)
            profile.close()
            generated = mean(agent_logs[1:], "completions/mean_length")  # policy tokens
            name = f"agent_{kind}"
            out[name] = {
                "s_per_step": round(agent_s, 2), "generated_tokens_per_rollout": round(generated, 1),
                "tokens_per_rollout_incl_masked":
                    round(generated / (1 - mean(agent_logs[1:], "agent/masked_fraction")), 1),
                "breakdown_s": {"rollout": round(mean(agent_logs[1:], "agent/rollout_s"), 2),
                                "of_which_env": round(mean(agent_logs[1:], "agent/env_s"), 2),
                                "generate_and_score": round(agent_generate_s, 2),
                                "loss_backward_optimizer": round(agent_s - agent_generate_s, 2)},
                "profile_per_step": profile.summary(),
            }  # fmt: skip
            if vllm:
                out[name]["env_overlapped_share"] = round(overlap(env.spans, steps), 3)
                out[name]["sampling_logp_difference_mean"] = mean(
                    agent_logs[1:], "sampling/sampling_logp_difference/mean"
                )
            agents[kind] = (agent_s, generated)
            del agent
        counters = env.counters.as_dict()
        length = max(1, round(generated))
        arms = [("single_turn", a.rollout_engine)] + (
            [("single_turn_hf", "trainer")] if a.single_turn_hf == "true" and vllm else []
        )
        for name, engine in arms:
            set_seed(0)
            on = engine == "vllm"
            kw = {} if on else {"generation_kwargs": {"min_new_tokens": length}}
            single = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=[answer_reward],
                                 args=common_args(Path(tmp) / name, a.steps, length, **kw), train_dataset=data,
                                 processing_class=tok, rollout_func=SingleTurnOnEngine(tok, length) if on else None)  # fmt: skip
            profile = Profile(single)
            with ExitStack() as arm:
                if on:
                    on_engine(single, arm, path)
                single_s, single_generate_s, single_logs = run(single)
            profile.close()
            single_tokens = mean(single_logs[1:], "completions/mean_length")
            out[name] = {"s_per_step": round(single_s, 2), "tokens_per_rollout": round(single_tokens, 1),
                         "breakdown_s": {"generate_and_score": round(single_generate_s, 2),
                                         "loss_backward_optimizer": round(single_s - single_generate_s, 2)},
                         "profile_per_step": profile.summary()}  # fmt: skip
            for kind, (agent_s, generated) in agents.items():
                ratio = (agent_s / generated) / (single_s / single_tokens)
                out[f"ratio_s_per_generated_token_agent_{kind}_vs_{name}"] = round(ratio, 3)
            del single
    queries, unique = counters["queries"], counters["unique_queries"]
    out |= {"queries": queries, "unique_queries": unique,
            "dedup_saved_share": round(1 - unique / queries, 3) if queries else None,
            "reranker_pairs": counters["reranker_pairs"],
            "reranker_pairs_without_dedup": counters["reranker_pairs_requested"] if a.reranker_url else None}  # fmt: skip
    tables = {"steps": steps_table(out), "profile": profile_table(out), "dedup": dedup_table(out)}
    print(f"rollout engine {a.rollout_engine}; {a.steps - 1} timed steps of 8 rollouts; env delay {a.env_delay_s} s "
          f"per call (a stand-in for a remote reranker's latency); doc_max_words {a.doc_max_words}")  # fmt: skip
    for table in tables.values():
        print("\n" + "\n".join(markdown_table(table)))
    path = Path(a.out) if a.out else RESULTS / f"{cpu_kind()}.json"
    write_result(path, out, tables, beside=a.beside)
    print(f"\nresult: {path}")


if __name__ == "__main__":
    main()
