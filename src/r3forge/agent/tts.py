"""Relevance-guided test-time scaling (Verbal-R3, Algorithm A1) and its majority-voting baselines.

Three strategies spend the same sample budget N per question and answer by majority vote:
- `naive`: N independent rollouts, every search retrieved and reranked on its own;
- `naive_unique`: the same rollouts with unique-query extraction (equal queries of a turn reranked once);
- `relevance`: branches carry (context, s, l); each iteration splits the remaining budget N - |F| over the
  branches (an equal base share, the remainder to branches in descending (s, l)); every branch samples its
  share of continuations; answers go to F; the search queries of all branches are de-duplicated globally
  and reranked once; a continuation searching q survives with probability (s_max,q / s_best)^alpha, where
  s_max,q is the best reranker score among q's documents and s_best the best over this iteration's
  queries, and becomes a branch with (s, l) = (s_max,q, that document's score-token logprob). Stops at
  |F| = N or after T iterations (the last one only answers). An empty branch set restarts from the root.
  Turns are read as `lockstep_rollouts` reads them, so every arm parses the same way: an invalid turn gets the
  correction message and continues as a branch, and an answer is the format parser's answer over the
  branch's whole completion (`reward.parse_completion`), as the majority-vote arms read a finished rollout.
Every arm has the same completion budget per sample (`max_completion_tokens`, within the engine's context): a
majority-vote rollout ends `truncated` at it, and a relevance-guided branch ends there unanswered.
Reranker calls are counted per strategy: unique (query) reranks and (query, document) pairs judged.
Questions go in batches of `batch_size // samples`: their turns are generated together, but each question's
searches are its own environment call, so de-duplication, s_best and the reranker counts stay per question.

    r3forge eval tts --config configs/eval/tts_world_cpu.yaml --model runs/grpo/agent_world_cpu/final
"""

from __future__ import annotations

import json
import math
import random
import sys
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from r3forge.agent.async_rollout import context_budgets, engine_context
from r3forge.agent.data import load_agent_rows
from r3forge.agent.env import EnvConfig, EnvCounters, SearchConfig, SearchEnv, open_env
from r3forge.agent.evaluate import EvalAgentConfig, open_policy
from r3forge.agent.reward import parse_completion
from r3forge.agent.rollout import (
    Encoder,
    Policy,
    RolloutConfig,
    encode_prompt,
    lockstep_rollouts,
    sampled_text,
    turn_action,
)
from r3forge.config import save_config
from r3forge.data.jsonio import write_json, write_jsonl
from r3forge.errors import ConfigError
from r3forge.metrics.qa import exact_match, f1_score, normalize_answer

STRATEGIES = ("naive", "naive_unique", "relevance")


@dataclass
class TTSConfig:
    samples: int = field(default=8, metadata={"help": "N: final answers (samples) per question."})
    alpha: float = field(
        default=7.5, metadata={"help": "Pruning sharpness: keep q with prob (s_q / s_best)^alpha."}
    )
    iterations: int = field(
        default=3, metadata={"help": "T: relevance-guided iterations (the last one only answers)."}
    )
    strategies: list[str] = field(
        default_factory=lambda: list(STRATEGIES), metadata={"help": f"Of {STRATEGIES}."}
    )

    def __post_init__(self) -> None:
        bad = [s for s in self.strategies if s not in STRATEGIES]
        if bad or not self.strategies:
            raise ConfigError(
                f"strategies: unknown or empty {bad or self.strategies}; choose from {STRATEGIES}"
            )
        if self.samples < 1 or self.iterations < 1 or self.alpha < 0:
            raise ConfigError(f"need samples >= 1, iterations >= 1, alpha >= 0; got {self}")


def majority(answers: list[str]) -> str:
    """The most frequent answer by normalized form (ties: the first seen); "" when there is none.

    >>> majority(["Paris", "rome", "the Paris", "Rome", "Paris"])
    'Paris'
    """
    answers = [a for a in answers if normalize_answer(a)]
    if not answers:
        return ""
    counts = Counter(normalize_answer(a) for a in answers)
    best = max(counts.values())
    return next(a for a in answers if counts[normalize_answer(a)] == best)


def shares(remaining: int, keys: list[tuple[float, float]]) -> list[int]:
    """Split `remaining` samples over branches: base share each, the remainder to the best (s, l) first.

    >>> shares(7, [(3.0, -1.0), (5.0, -2.0), (5.0, -0.5)])
    [2, 2, 3]
    """
    b = len(keys)
    base, extra = divmod(remaining, b)
    ranked = sorted(range(b), key=lambda i: (-keys[i][0], -_num(keys[i][1])))
    out = [base] * b
    for i in ranked[:extra]:
        out[i] += 1
    return out


def keep_probability(s_q: float, s_best: float, alpha: float) -> float:
    """(s_q / s_best)^alpha; 1 when no query scored above 0.

    >>> round(keep_probability(4.0, 5.0, 7.5), 4), keep_probability(0.0, 0.0, 7.5)
    (0.1876, 1.0)
    """
    return 1.0 if s_best <= 0 else (max(s_q, 0.0) / s_best) ** alpha


def _num(x: float) -> float:
    return -math.inf if x is None or math.isnan(x) else x


@dataclass
class Branch:
    ids: list[int]  # completion so far (after the prompt)
    s: float = 0.0
    l: float = 0.0  # noqa: E741


def relevance_guided(
    prompt: list[int],
    policy: Policy,
    env: SearchEnv,
    tokenizer: Any,
    rollout: RolloutConfig,
    tts: TTSConfig,
    rng: random.Random,
    budget: int | None = None,
) -> list[str]:
    """Algorithm A1 for one question; returns F (the final answers, at most N).

    `budget`: completion tokens of one branch (its turns, observations and corrections), as a majority-vote
    rollout has (`context_budgets`): a turn is cut where its branch reaches it, and a branch at it ends
    without an answer, as a rollout ends `truncated`. None: no budget beyond `iterations`."""
    return relevance_guided_batch([prompt], policy, env, tokenizer, rollout, tts, rng, [budget])[0]


def relevance_guided_batch(
    prompts: list[list[int]],
    policy: Policy,
    env: SearchEnv,
    tokenizer: Any,
    rollout: RolloutConfig,
    tts: TTSConfig,
    rng: random.Random,
    budgets: list[int | None],
) -> list[list[str]]:
    """`relevance_guided` for several questions in lockstep: each question keeps its own branches, F, budget,
    s_best and de-duplication (one environment call per question and iteration); only their turns are
    generated together, one `policy.generate` per iteration."""
    enc = Encoder(tokenizer)
    finals: list[list[str]] = [[] for _ in prompts]
    branches = [[Branch([])] for _ in prompts]
    for t in range(tts.iterations):
        jobs: list[tuple[int, Branch]] = []  # (question, branch), one per sample to draw
        for q, final in enumerate(finals):
            if len(final) < tts.samples:
                live = branches[q] or [Branch([])]  # an empty branch set restarts from the root
                counts = shares(tts.samples - len(final), [(b.s, b.l) for b in live])
                jobs += [(q, b) for b, k in zip(live, counts, strict=True) for _ in range(k)]
        if not jobs:
            break
        room = max(
            rollout.max_turn_tokens if budgets[q] is None else budgets[q] - len(b.ids) for q, b in jobs
        )
        turns = policy.generate([prompts[q] + b.ids for q, b in jobs], min(rollout.max_turn_tokens, room))
        pending: list[list[tuple[Branch, list[int], str]]] = [[] for _ in prompts]
        branches = [[] for _ in prompts]
        for (q, b), turn in zip(jobs, turns, strict=True):
            ids = turn.ids if budgets[q] is None else turn.ids[: budgets[q] - len(b.ids)]
            action, arg = turn_action(sampled_text(tokenizer, ids))
            if action == "answer":  # read as the majority-vote arms read a rollout: the whole completion
                text = sampled_text(tokenizer, b.ids + ids)
                if (answer := parse_completion(text).answer) is not None:
                    finals[q].append(answer)
            elif t == tts.iterations - 1:
                continue  # the last iteration only answers
            elif action == "search":
                pending[q].append((b, ids, arg))
            else:  # an invalid turn is corrected and continues, as in `lockstep_rollouts`
                branches[q].append(Branch(b.ids + ids + enc.correction, b.s, b.l))
        for q, asked in enumerate(pending):
            if not asked:
                continue
            observations = env.observe([a for _, _, a in asked])  # one batched, de-duplicated call
            best = {
                o.query: (o.scores[0] if o.scores else 0.0, o.tiebreak[0] if o.tiebreak else math.nan)
                for o in observations
            }
            s_best = max(s for s, _ in best.values())
            for (b, ids, _), obs in zip(asked, observations, strict=True):
                s_q, l_q = best[obs.query]
                if rng.random() < keep_probability(s_q, s_best, tts.alpha):
                    branches[q].append(
                        Branch(b.ids + ids + enc.observation(obs.text, rollout.max_obs_tokens), s_q, l_q)
                    )
        for q, budget in enumerate(budgets):  # a branch with no token left to act ends here, unanswered
            if budget is not None:
                branches[q] = [b for b in branches[q] if len(b.ids) < budget]
    return [final[: tts.samples] for final in finals]


def main(
    config: EvalAgentConfig,
    tts: TTSConfig,
    search: SearchConfig,
    env_config: EnvConfig,
    rollout: RolloutConfig,
) -> dict[str, Any]:
    """Run each strategy on the same questions; write rows.jsonl and summary.json (accuracy and calls)."""
    if config.temperature <= 0:
        raise ConfigError("eval tts samples: set temperature > 0 (e.g. 1.0)")
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_config((config, tts, search, env_config, rollout), out / "config.yaml")
    rows = load_agent_rows(
        config.dataset,
        config.split,
        config.heldout_fraction,
        env_config.observation,
        config.max_questions,
        config.qa_format,
        config.example,
    )
    summary: dict[str, Any] = {"questions": len(rows), "samples": tts.samples, "model": config.model}
    results: dict[str, list[dict[str, Any]]] = {}
    per_batch = max(1, config.batch_size // tts.samples)  # questions whose samples are generated together
    with ExitStack() as stack:
        policy, tokenizer = open_policy(stack, config)
        env = open_env(stack, search, env_config)
        for strategy in tts.strategies:
            torch.manual_seed(config.seed)
            rng = random.Random(config.seed)
            env.counters = EnvCounters()  # each strategy's own calls
            env.config.dedup = strategy != "naive"
            scored = []
            for chunk in range(0, len(rows), per_batch):
                batch = rows[chunk : chunk + per_batch]
                prompts = [encode_prompt(tokenizer, row["prompt"]) for row in batch]
                budgets = context_budgets(prompts, config.max_completion_tokens, engine_context(policy))
                if strategy == "relevance":
                    votes = relevance_guided_batch(
                        prompts, policy, env, tokenizer, rollout, tts, rng, budgets
                    )
                else:  # N samples of each question; its own group: de-duplication stays within the question
                    n = tts.samples
                    rs = lockstep_rollouts(
                        [p for p in prompts for _ in range(n)],
                        policy,
                        env,
                        tokenizer,
                        rollout,
                        [b for b in budgets for _ in range(n)],
                        [q // n for q in range(n * len(batch))],
                    )
                    texts = [sampled_text(tokenizer, r.completion_ids) for r in rs]
                    parsed = [parse_completion(x).answer for x in texts]
                    votes = [
                        [a for a in parsed[q * n : (q + 1) * n] if a is not None] for q in range(len(batch))
                    ]
                for row, answers in zip(batch, votes, strict=True):
                    vote = majority(answers)
                    scored.append(
                        {
                            "id": row["id"],
                            "answers": row["answers"],
                            "votes": answers,
                            "prediction": vote,
                            "em": exact_match(vote, row["answers"]),
                            "f1": f1_score(vote, row["answers"]),
                        }
                    )
                print(f"eval tts {strategy}: {len(scored)}/{len(rows)}", file=sys.stderr)
            results[strategy] = scored
            n = len(scored)
            summary[strategy] = {
                "em": sum(r["em"] for r in scored) / n,
                "f1": sum(r["f1"] for r in scored) / n,
                "answers_per_question": sum(len(r["votes"]) for r in scored) / n,
                **env.counters.as_dict(),
            }
            # after each strategy: an interrupted run keeps the strategies it finished
            write_results(out, summary, results)
    print(json.dumps(summary))
    return summary


def write_results(out: Path, summary: dict[str, Any], results: dict[str, list[dict[str, Any]]]) -> None:
    """rows.jsonl and summary.json of the strategies finished so far; pairs_vs_naive once naive has run."""
    base = summary.get("naive", {}).get("reranker_pairs")
    for strategy in results:
        if base:
            summary[strategy]["pairs_vs_naive"] = summary[strategy]["reranker_pairs"] / base - 1
    summary["strategies_done"] = list(results)
    write_jsonl(
        out / "rows.jsonl",
        [{"strategy": strategy, **r} for strategy, scored in results.items() for r in scored],
    )
    write_json(out / "summary.json", summary)


TTS_CONFIGS = (EvalAgentConfig, TTSConfig, SearchConfig, EnvConfig, RolloutConfig)
