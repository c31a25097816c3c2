"""Format warm start for small generators: SFT rows of worked search trajectories.

A 135M model never writes the tags on its own, so GRPO would see reward 0 everywhere and learn nothing.
`r3forge data agent-warmstart` writes prompt/completion rows whose completion is a worked trajectory: one
<search> per hop (the record's sub-questions, or the question for one hop), the real observation the
environment returns for it (the run's retriever, raw or verbal), and the gold answer. `r3forge sft` on those
rows (a few dozen steps) teaches the format; GRPO then learns when and what to search from the reward.
Build the rows with the observation settings the GRPO run uses (`observation: verbal` by default, with its
reranker, num_retrieve, num_shown, doc_max_words): the warm start teaches the format GRPO will show.
The rows use training questions only (the same hashed split `eval agent` holds out). In SFT the observation
tokens are part of the completion; the GRPO recipe masks them.

    r3forge data agent-warmstart --dataset data/synth_world/questions.jsonl --index indexes/world-bm25 \\
        --output runs/agent/warmstart.jsonl --max_questions 200
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r3forge.agent.data import hops, instruction, is_heldout, trajectory
from r3forge.agent.env import EnvConfig, SearchConfig, SearchEnv, open_env
from r3forge.agent.reward import answerable
from r3forge.data.jsonio import write_jsonl
from r3forge.data.loaders import load_qa


@dataclass
class WarmstartArgs:
    dataset: str = field(metadata={"help": "Questions (with sub-questions for multi-hop trajectories)."})
    output: str = field(
        metadata={"help": "JSONL of prompt/completion chat rows to write (for `r3forge sft`)."}
    )
    qa_format: str = field(default="auto", metadata={"help": "QA format for load_qa (auto: detect)."})
    heldout_fraction: float = field(
        default=0.2, metadata={"help": "Same as the GRPO run's: held-out questions are never written."}
    )
    max_questions: int = field(
        default=200, metadata={"help": "Training questions to write trajectories for."}
    )
    example: bool = field(
        default=False, metadata={"help": "Prompts with the worked example (as in training)."}
    )


def write_warmstart(args: WarmstartArgs, search: SearchConfig, env_config: EnvConfig) -> dict[str, Any]:
    """Build the rows with the real environment (one batched observe per hop index)."""
    records = [
        r | {"answers": golds}
        for r in load_qa(args.dataset, format=args.qa_format)
        if not is_heldout(r["id"], args.heldout_fraction) and (golds := answerable(r["answers"]))
    ]
    records = records[: args.max_questions]
    with ExitStack() as stack:
        env: SearchEnv = open_env(stack, search, env_config)
        chains = [hops(r) for r in records]
        observed: list[list[str]] = [[] for _ in records]
        for k in range(max(len(c) for c in chains)):
            todo = [i for i, c in enumerate(chains) if k < len(c)]
            for i, obs in zip(todo, env.observe([chains[i][k][0] for i in todo]), strict=True):
                observed[i].append(obs.text)
    out = Path(args.output)
    rows = [
        {
            "id": r["id"],
            "prompt": instruction(r["question"], env_config.observation, args.example),
            "completion": [{"role": "assistant", "content": trajectory(r, obs)}],
        }
        for r, obs in zip(records, observed, strict=True)
    ]
    write_jsonl(out, rows)
    stats = {"rows": len(records), "searches": env.counters.queries, "output": str(out)}
    print(json.dumps(stats))
    return stats
