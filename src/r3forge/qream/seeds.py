"""QREAM's stylistic seeds: M training questions unrelated to the target questions, each with a
background-style document a generator writes for it. The (seed question, document) pairs are the few-shot
demonstrations of the rewriter; taking them from unrelated questions separates style from content (the
paper's ablation: seeds generated from the target question itself hurt).

    seeds = sample_seeds(load_qa("train.jsonl"), targets, m=4, seed=0)
    run_step(SeedDocStep(), seeds, generator, EngineConfig("runs/qream/seeds"))
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from r3forge.backends.base import GenerationRequest, GenerationResult
from r3forge.errors import ConfigError
from r3forge.metrics.qa import normalize_answer
from r3forge.qream.rewrite import trim_generation
from r3forge.synth.engine import Rejected
from r3forge.synth.export import load_accepted

SEED_PROMPT_VERSION = "qream_seed_doc_v1"
SEED_PROMPT = (
    "Write a short background document (one paragraph, about {words} words) that gives the information "
    "needed to answer the question below, in the neutral style of an encyclopedia article. Write only the "
    "document.\n\nQuestion: {question}"
)


def sample_seeds(pool: Iterable[dict], targets: Iterable[dict], m: int = 4, seed: int = 0) -> list[dict]:
    """`m` seed questions from `pool` (canonical QA records), none related to a target: a pool record is
    excluded when its id, its normalized question or one of its normalized answers equals a target's.

    The draw is a seeded shuffle of the eligible records (stable across runs and machines). Raises
    `ConfigError` when fewer than `m` records are eligible.
    """
    if m < 1:
        raise ConfigError(f"the number of seeds m must be >= 1, got {m}")
    ids, questions, answers = set(), set(), set()
    for t in targets:
        ids.add(str(t["id"]))
        questions.add(normalize_answer(t["question"]))
        answers.update(normalize_answer(a) for a in t.get("answers") or [] if normalize_answer(a))
    eligible = [
        r
        for r in pool
        if str(r["id"]) not in ids
        and normalize_answer(r["question"]) not in questions
        and not any(normalize_answer(a) in answers for a in r.get("answers") or [])
    ]
    if len(eligible) < m:
        raise ConfigError(f"only {len(eligible)} seed candidates unrelated to the targets; need m={m}")
    eligible.sort(key=lambda r: str(r["id"]))
    random.Random(seed).shuffle(eligible)
    return [{"seed_id": str(r["id"]), "question": r["question"]} for r in eligible[:m]]


def load_demos(root: str | Path, targets: Iterable[dict], where: str) -> list[tuple[str, str]]:
    """(seed question, seed document) pairs from `root`/seeds (an `annotate qream` or `rewrite` folder), none
    of whose questions is a target; `where` names the config key in errors."""
    folder = Path(root) / "seeds"
    if not folder.is_dir():
        raise ConfigError(f"{where}: {folder} does not exist (an `annotate qream` output folder?)")
    seeds = list(load_accepted(folder))
    if not seeds:
        raise ConfigError(f"{where}: no accepted seed document under {folder}")
    check_disjoint(seeds, targets)
    return [(s["question"], s["document"]) for s in seeds]


def check_disjoint(seeds: Sequence[dict], targets: Iterable[dict]) -> None:
    """Raise `ConfigError` if a seed question is one of the targets (by id or normalized text)."""
    target = {(str(t["id"]), normalize_answer(t["question"])) for t in targets}
    ids, texts = {i for i, _ in target}, {q for _, q in target}
    clash = [s["seed_id"] for s in seeds if s["seed_id"] in ids or normalize_answer(s["question"]) in texts]
    if clash:
        raise ConfigError(f"seed questions {clash} are also target questions")


@dataclass
class SeedDocStep:
    """The `SynthesisStep` writing one background document per seed question."""

    words: int = 100
    temperature: float = 0.0
    max_tokens: int = 256
    tokenizer: object = field(default=None, repr=False, compare=False)  # unused; uniform with other steps
    name: str = field(default="qream_seed_doc", init=False)

    def __post_init__(self) -> None:
        self.version = f"{SEED_PROMPT_VERSION}+w{self.words}"

    def key(self, item: dict) -> dict:
        return {"seed_id": item["seed_id"], "question": item["question"]}

    def prompt(self, item: dict) -> GenerationRequest:
        content = SEED_PROMPT.format(words=self.words, question=item["question"])
        return GenerationRequest(
            messages=[{"role": "user", "content": content}],
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )

    def parse(self, item: dict, result: GenerationResult) -> dict | Rejected:
        choice = result.choices[0]
        cut = choice.finish_reason == "length"
        text, trimmed = trim_generation(choice.text, cut)
        if len(text.split()) < 10:
            return Rejected(
                "truncated" if cut else "too_short", f"{len(text.split())} words ({trimmed or '-'})"
            )
        return {
            "seed_id": item["seed_id"],
            "question": item["question"],
            "document": text,
            "trimmed": trimmed,
        }
