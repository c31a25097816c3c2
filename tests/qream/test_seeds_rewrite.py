"""Seeds disjoint from the targets, l-token truncation, and one real rewriting round (then a second round
on its first l tokens) of the embedded model on HotpotQA."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from r3forge.backends import HFLocalBackend, HFLocalConfig
from r3forge.backends.base import Choice, GenerationResult, Usage
from r3forge.data.loaders import load_qa
from r3forge.errors import ConfigError
from r3forge.metrics.qa import normalize_answer
from r3forge.qream.rewrite import RewriteStep, first_tokens, raw_retrieval, rewrite_item
from r3forge.qream.seeds import SeedDocStep, check_disjoint, sample_seeds
from r3forge.synth import EngineConfig, Rejected, load_accepted, run_step

DEMOS = [
    ("Who painted the Mona Lisa?", "The Mona Lisa is a portrait painted by Leonardo da Vinci in Florence.")
]


@pytest.fixture(scope="module")
def hotpot(shared_data: Path) -> tuple[list[dict], list[dict]]:
    train = list(load_qa(shared_data / "hotpotqa" / "rpt_distractor_dev_sample_train.jsonl"))
    dev = list(load_qa(shared_data / "hotpotqa" / "rpt_distractor_dev_sample_dev.jsonl"))
    return train, dev


def test_seeds_are_disjoint_from_targets_and_deterministic(hotpot) -> None:
    train, dev = hotpot
    targets = train[:50] + dev[:50]  # targets drawn from the very pool the seeds come from
    seeds = sample_seeds(train, targets, m=4, seed=0)
    assert len(seeds) == 4 and seeds == sample_seeds(list(reversed(train)), targets, m=4, seed=0)
    assert sample_seeds(train, targets, m=4, seed=1) != seeds
    check_disjoint(seeds, targets)
    target_answers = {normalize_answer(a) for t in targets for a in t["answers"]}
    chosen = {s["seed_id"] for s in seeds}
    for record in train:
        if record["id"] in chosen:
            assert not {normalize_answer(a) for a in record["answers"]} & target_answers
    with pytest.raises(ConfigError, match="also target questions"):
        check_disjoint(seeds, [{"id": seeds[0]["seed_id"], "question": "other"}])
    with pytest.raises(ConfigError, match="unrelated to the targets"):
        sample_seeds(train[:3], train[:2], m=2)


def test_first_tokens(smollm2_path: Path) -> None:
    tok = AutoTokenizer.from_pretrained(smollm2_path)
    text = (
        "The Eiffel Tower, completed in 1889, is a wrought-iron lattice tower on the Champ de Mars in Paris."
    )
    head = first_tokens(text, tok, 8)
    assert text.startswith(head) and len(tok(head, add_special_tokens=False)["input_ids"]) <= 8
    assert first_tokens(text, tok, 10_000) == text
    assert first_tokens(text, None, 3) == "The Eiffel Tower,"
    with pytest.raises(ConfigError):
        first_tokens(text, tok, 0)


def test_rewrite_step_keys_versions_and_parse() -> None:
    step = RewriteStep(DEMOS)
    item = rewrite_item({"id": "q", "question": "Who?", "answers": ["X"]}, "raw text", round=1)
    assert step.key(item) != step.key(item | {"source": "other"}) != step.key(item | {"round": 2})
    assert RewriteStep(DEMOS + DEMOS).version != step.version
    ok = GenerationResult([Choice("Document: " + "word " * 12, [], [], [], "stop")], Usage())
    assert step.parse(item, ok)["rewrite"] == ("word " * 12).strip()
    short = GenerationResult([Choice("Document: tiny", [], [], [], "stop")], Usage())
    assert step.parse(item, short).reason == "too_short"
    cut = GenerationResult([Choice("Document: long", [], [], [], "length")], Usage())
    assert step.parse(item, cut) == Rejected("truncated", "0 words < 10 after trimming (unfinished)")
    loop = (
        "Paris is the capital of France and its largest city. It is on the Seine. "
        + "It is on the Seine. " * 9
    )
    out = step.parse(item, GenerationResult([Choice(loop, [], [], [], "length")], Usage()))
    assert out["rewrite"] == "Paris is the capital of France and its largest city. It is on the Seine."
    assert out["trimmed"] == "repetition"
    with pytest.raises(ConfigError):
        RewriteStep([])


@pytest.mark.slow
def test_two_real_rounds(hotpot, smollm2_path: Path, tmp_path: Path) -> None:
    train, dev = hotpot
    backend = HFLocalBackend.from_config(HFLocalConfig(model=str(smollm2_path)))
    seeds = sample_seeds(train, dev[:2], m=2)
    run_step(SeedDocStep(words=60, max_tokens=160), seeds, backend,
             EngineConfig(output_dir=str(tmp_path / "seeds"), progress=False))  # fmt: skip
    docs = list(load_accepted(tmp_path / "seeds"))
    assert docs, "no seed document parsed"
    step = RewriteStep([(d["question"], d["document"]) for d in docs], max_tokens=200)
    items = [rewrite_item(r, raw_retrieval(r["passages"], k=3), round=1) for r in dev[:2]]
    run_step(step, items, backend, EngineConfig(output_dir=str(tmp_path / "r1"), progress=False))
    round1 = list(load_accepted(tmp_path / "r1"))
    assert round1 and all(r["round"] == 1 and r["rewrite"] for r in round1)
    tok = backend.tokenizer
    by_id = {r["id"]: r for r in dev[:2]}
    items2 = [
        rewrite_item(by_id[r["question_id"]], first_tokens(r["rewrite"], tok, 100), round=2) for r in round1
    ]
    run_step(step, items2, backend, EngineConfig(output_dir=str(tmp_path / "r2"), progress=False))
    for r in load_accepted(tmp_path / "r2"):
        assert r["round"] == 2 and len(tok(r["source"], add_special_tokens=False)["input_ids"]) <= 100
