"""A small synthetic world (200 passages, 30 questions) on disk with its real BM25 index, and a scripted
policy for walking the rollout loops' branches with known turns."""

from __future__ import annotations

from pathlib import Path

import pytest

from r3forge.agent.rollout import Turn
from r3forge.data.synth_world import SynthWorldConfig
from r3forge.data.world_files import main as write_world
from r3forge.retrieval import build_bm25_index


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("agent_world")
    write_world(SynthWorldConfig(seed=0, num_passages=200, num_questions=30, output_dir=str(root / "world")))
    index = build_bm25_index(root / "world" / "corpus.jsonl", root / "bm25", show_progress=False)
    return {"questions": root / "world" / "questions.jsonl", "index": Path(index)}


class ScriptedPolicy:
    """A deterministic policy: turn t of every rollout is `script[t]` (text, tokenized once), with logprobs
    -(1 + position) so each token's logprob is recognizable. Lets one test walk every branch of the loop."""

    def __init__(self, tokenizer, script: list[str]):
        self.turns = [tokenizer.encode(s, add_special_tokens=False) for s in script]
        self.calls = 0

    def generate(self, prompts, max_new_tokens):
        ids = self.turns[self.calls][:max_new_tokens]
        self.calls += 1
        return [Turn(list(ids), [-(1.0 + i) for i in range(len(ids))], "stop") for _ in prompts]


@pytest.fixture
def scripted_policy() -> type[ScriptedPolicy]:
    return ScriptedPolicy
