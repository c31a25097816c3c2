"""`r3forge eval agent`: the search agent on held-out questions, EM/F1, searches, RA-R and CUE-R.

Each question is rolled out once (greedy by default) with the same environment and budgets as training.
Per question (rows.jsonl): the parsed final answer, EM, F1, the number of searches, whether the format
was valid, and
- RA-R (retrieval accurate): a gold answer appears in any observation the agent read (`ra_r`, the text
  inside <information>) or in the shown documents themselves (`ra_docs`);
- CUE-R = P(correct | RA-R): how often the agent uses evidence that was put in front of it.
summary.json holds the means and the environment's counters (queries, unique queries, reranker pairs).

    r3forge eval agent --config configs/eval/agent_world_cpu.yaml --model runs/grpo/agent_world_cpu/final
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from r3forge.agent.async_rollout import configured_rollouts
from r3forge.agent.data import load_agent_rows
from r3forge.agent.env import EnvConfig, SearchConfig, open_env
from r3forge.agent.reward import answer_reward_one, parse_completion
from r3forge.agent.rollout import HFPolicy, Policy, RolloutConfig, VLLMPolicy, encode_prompt, sampled_text
from r3forge.backends.open import LLMConfig, open_llm
from r3forge.config import save_config
from r3forge.data.jsonio import write_json, write_jsonl
from r3forge.metrics.qa import answer_in_text, exact_match, f1_score


@dataclass
class EvalAgentConfig:
    dataset: str = field(metadata={"help": "Questions (the training file: its held-out split is scored)."})
    output_dir: str = field(metadata={"help": "Run folder: rows.jsonl, summary.json, config.yaml."})
    model: str = field(
        default="smollm2-135m-instruct",
        metadata={
            "help": "The generator: a checkpoint folder (GRPO final/), an embedded name or Hub id.",
            "model": (),
        },
    )
    qa_format: str = field(default="auto", metadata={"help": "QA format for load_qa (auto: detect)."})
    split: Literal["heldout", "train", "all"] = field(
        default="heldout", metadata={"help": "Which hashed split of `dataset` to score."}
    )
    heldout_fraction: float = field(default=0.2, metadata={"help": "The training run's heldout_fraction."})
    max_questions: int | None = field(
        default=None, metadata={"help": "Score only the first N questions (unset: all)."}
    )
    example: bool = field(
        default=False, metadata={"help": "Prompts with the worked example (as in training)."}
    )
    policy_backend: Literal["hf", "vllm"] = field(
        default="hf", metadata={"help": "hf: transformers generate; vllm: vLLM's offline engine."}
    )
    max_model_len: int = field(
        default=2048,
        metadata={
            "help": "policy_backend vllm: the engine's context (prompt + whole rollout); a rollout "
            "that reaches it ends truncated.",
            "min": 1,
        },
    )
    temperature: float = field(
        default=0.0, metadata={"help": "Sampling temperature of the agent (0: greedy)."}
    )
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling of the agent."})
    batch_size: int = field(
        default=16, metadata={"help": "Rollouts advanced together (one env call per turn)."}
    )
    max_completion_tokens: int = field(default=4096, metadata={"help": "Token budget of one whole rollout."})
    seed: int = field(default=0, metadata={"help": "Sampling seed (temperature > 0)."})
    overwrite: bool = field(
        default=False,
        metadata={"help": "Move a folder of another run (or of this one) aside to <folder>.replaced-<time>."},
    )


def open_policy(stack: ExitStack, config: EvalAgentConfig) -> tuple[Policy, Any]:
    """The policy and its tokenizer, opened by `open_llm` (closed with `stack`)."""
    llm = stack.enter_context(
        open_llm(
            LLMConfig(
                backend=config.policy_backend, model=config.model, serve_max_model_len=config.max_model_len
            ),
            seed=config.seed,
        )
    )
    if config.policy_backend == "vllm":
        return VLLMPolicy(
            llm.backend.llm, llm.tokenizer.eos_token_id, config.temperature, config.top_p
        ), llm.tokenizer
    return HFPolicy(
        llm.backend.model, llm.tokenizer, config.temperature, config.top_p, config.batch_size
    ), llm.tokenizer


def score_rollout(row: dict[str, Any], text: str, observations: list[Any]) -> dict[str, Any]:
    """One question's metrics from its completion text and observations.

    >>> from r3forge.agent.env import Observation
    >>> obs = [Observation("q", "[Doc 1] born 1858", ["p1"], [5.0], [0.0], "Peibrette Thesick was born in 1858.")]
    >>> r = score_rollout({"answers": ["1858"]}, "<search>q</search><information>x</information><answer>1858</answer>", obs)
    >>> r["em"], r["ra_r"], r["ra_docs"], r["format_ok"]
    (1.0, True, True, True)
    """
    parsed = parse_completion(text)
    prediction = parsed.answer or ""
    answers = row["answers"]
    return {
        "prediction": prediction,
        "em": exact_match(prediction, answers),
        "f1": f1_score(prediction, answers),
        "reward": answer_reward_one(text, answers),
        "format_ok": parsed.valid,
        "searches": len(observations),
        "ra_r": any(answer_in_text(answers, o.text) for o in observations),
        "ra_docs": any(answer_in_text(answers, o.docs_text) for o in observations),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over questions; CUE-R over the questions whose observations held a gold answer.

    >>> summarize([{"em": 1.0, "f1": 1.0, "reward": 1.0, "format_ok": True, "searches": 1, "ra_r": True, "ra_docs": True},
    ...            {"em": 0.0, "f1": 0.0, "reward": 0.2, "format_ok": True, "searches": 2, "ra_r": True, "ra_docs": False}])["cue_r"]
    0.5
    """
    n = len(rows)
    mean = lambda key: sum(float(r[key]) for r in rows) / n  # noqa: E731
    accurate = [r for r in rows if r["ra_r"]]
    accurate_docs = [r for r in rows if r["ra_docs"]]
    return {
        "questions": n,
        "em": mean("em"),
        "f1": mean("f1"),
        "reward": mean("reward"),
        "format_ok": mean("format_ok"),
        "searches_per_question": mean("searches"),
        "ra_r": mean("ra_r"),
        "ra_docs": mean("ra_docs"),
        "cue_r": sum(r["em"] for r in accurate) / len(accurate) if accurate else None,
        "cue_docs": sum(r["em"] for r in accurate_docs) / len(accurate_docs) if accurate_docs else None,
    }


def main(
    config: EvalAgentConfig, search: SearchConfig, env_config: EnvConfig, rollout: RolloutConfig
) -> dict:
    """Roll out, score, write the run folder; returns the summary."""
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_config((config, search, env_config, rollout), out / "config.yaml")
    torch.manual_seed(config.seed)
    rows = load_agent_rows(
        config.dataset,
        config.split,
        config.heldout_fraction,
        env_config.observation,
        config.max_questions,
        config.qa_format,
        config.example,
    )
    start = time.time()
    scored = []
    with ExitStack() as stack:
        env = open_env(stack, search, env_config)
        policy, tokenizer = open_policy(stack, config)
        for begin in range(0, len(rows), config.batch_size):
            chunk = rows[begin : begin + config.batch_size]
            ids = [encode_prompt(tokenizer, r["prompt"]) for r in chunk]
            for row, r in zip(
                chunk,
                configured_rollouts(ids, policy, env, tokenizer, rollout, config.max_completion_tokens),
                strict=True,
            ):
                text = sampled_text(tokenizer, r.completion_ids)  # as sampled: no special token dropped
                scored.append(
                    {
                        "id": row["id"],
                        "question": row["question"],
                        "answers": row["answers"],
                        **score_rollout(row, text, r.observations),
                        "queries": r.searches,
                        "finish": r.finish,
                        "prompt_tokens": len(r.prompt_ids),
                        "tokens": len(r.completion_ids),
                        "policy_tokens": sum(r.env_mask),
                        "completion": text,
                    }
                )
            print(f"eval agent: {len(scored)}/{len(rows)} questions", file=sys.stderr)
        counters = env.counters.as_dict()
    summary = summarize(scored) | {
        "model": config.model,
        "env": counters,
        "seconds": round(time.time() - start, 1),
    }
    write_jsonl(out / "rows.jsonl", scored)
    write_json(out / "summary.json", summary)
    print(json.dumps(summary))
    return summary


EVAL_AGENT_CONFIGS = (EvalAgentConfig, SearchConfig, EnvConfig, RolloutConfig)
