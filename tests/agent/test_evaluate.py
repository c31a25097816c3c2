"""`r3forge eval agent` and `r3forge eval tts` end to end on the small world (embedded model, raw observations
from a real BM25 index), plus the pieces of Algorithm A1."""

from __future__ import annotations

import json
import random

import pytest

from r3forge.agent.env import EnvConfig, SearchConfig, SearchEnv
from r3forge.agent.evaluate import EVAL_AGENT_CONFIGS
from r3forge.agent.evaluate import main as eval_main
from r3forge.agent.reward import parse_completion
from r3forge.agent.rollout import RolloutConfig, Turn, encode_prompt, lockstep_rollouts
from r3forge.agent.tts import (
    TTSConfig,
    keep_probability,
    majority,
    relevance_guided,
    relevance_guided_batch,
    shares,
    write_results,
)
from r3forge.agent.tts import main as tts_main
from r3forge.config import parse_config
from r3forge.errors import ConfigError
from r3forge.retrieval import load_retriever


def flags(world, smollm2_path, out, *extra):
    return ["--model", str(smollm2_path), "--dataset", str(world["questions"]), "--output_dir", str(out),
            "--split", "all", "--max_questions", "3", "--example", "true", "--index", str(world["index"]),
            "--observation", "raw", "--num_shown", "1", "--doc_max_words", "20", "--max_turns", "1",
            "--max_turn_tokens", "24", "--max_obs_tokens", "40", "--max_completion_tokens", "160", *extra]  # fmt: skip


def test_eval_agent_writes_rows_and_summary(world, smollm2_path, tmp_path):
    summary = eval_main(*parse_config(EVAL_AGENT_CONFIGS, flags(world, smollm2_path, tmp_path / "e")))
    rows = [json.loads(line) for line in (tmp_path / "e" / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == summary["questions"] == 3
    for row in rows:
        assert row["searches"] == len(row["queries"]) <= 1 and row["em"] in (0.0, 1.0)
        assert row["ra_r"] in (True, False) and 0.0 <= row["f1"] <= 1.0
        assert row["prompt_tokens"] > 0 and 0 < row["policy_tokens"] <= row["tokens"] <= 160
        if row["searches"]:  # its observation is counted in tokens, not in policy_tokens
            assert row["policy_tokens"] < row["tokens"]
    assert summary["searches_per_question"] == sum(r["searches"] for r in rows) / 3
    assert summary["env"]["queries"] == sum(r["searches"] for r in rows)
    ra = [r for r in rows if r["ra_r"]]
    assert summary["cue_r"] == (sum(r["em"] for r in ra) / len(ra) if ra else None)


@pytest.mark.slow  # ~3 min on 2 cores: three strategies x 3 questions x 3 samples
def test_eval_tts_three_strategies_count_calls(world, smollm2_path, tmp_path):
    argv = flags(
        world, smollm2_path, tmp_path / "t", "--temperature", "1.0", "--samples", "3", "--iterations", "2"
    )
    configs = parse_config((EVAL_AGENT_CONFIGS[0], TTSConfig, *EVAL_AGENT_CONFIGS[1:]), argv)
    summary = tts_main(*configs)
    for strategy in ("naive", "naive_unique", "relevance"):
        s = summary[strategy]
        assert 0.0 <= s["em"] <= 1.0 and s["answers_per_question"] <= 3
    # the same rollouts with and without unique-query extraction: equal queries, fewer retrievals
    assert (
        summary["naive"]["queries"]
        == summary["naive_unique"]["queries"]
        == summary["naive"]["unique_queries"]
    )
    assert summary["naive_unique"]["unique_queries"] <= summary["naive"]["unique_queries"]
    rows = (tmp_path / "t" / "rows.jsonl").read_text().splitlines()
    assert len(rows) == 9
    assert json.loads((tmp_path / "t" / "summary.json").read_text())["strategies_done"] == list(
        TTSConfig().strategies
    )


def test_tts_results_are_written_as_each_strategy_finishes(tmp_path):
    row = {"id": "q1", "answers": ["x"], "votes": ["x"], "prediction": "x", "em": 1.0, "f1": 1.0}
    summary = {"questions": 1, "naive": {"em": 1.0, "reranker_pairs": 8}}
    write_results(tmp_path, summary, {"naive": [row]})  # a run cut off after its first strategy
    assert json.loads((tmp_path / "summary.json").read_text())["strategies_done"] == ["naive"]
    summary["relevance"] = {"em": 1.0, "reranker_pairs": 6}
    write_results(tmp_path, summary, {"naive": [row], "relevance": [row]})
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["strategies_done"] == ["naive", "relevance"]
    assert saved["relevance"]["pairs_vs_naive"] == pytest.approx(-0.25)
    assert [json.loads(x)["strategy"] for x in (tmp_path / "rows.jsonl").read_text().splitlines()] == [
        "naive",
        "relevance",
    ]


class AlwaysSearch:
    """Every branch searches the same query on the first iteration and answers on the second."""

    def __init__(self, tokenizer):
        self.tok, self.calls, self.max_new_tokens = tokenizer, [], []

    def generate(self, prompts, max_new_tokens):
        self.calls.append(len(prompts))
        self.max_new_tokens.append(max_new_tokens)
        text = "<search> born in </search>" if len(self.calls) == 1 else "<answer> 1858 </answer>"
        ids = self.tok.encode(text, add_special_tokens=False)
        return [Turn(ids, [0.0] * len(ids), "stop") for _ in prompts]


def test_relevance_guided_dedups_globally_and_spends_the_budget(world, smollm2_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_path)
    env = SearchEnv(load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=1))
    policy = AlwaysSearch(tok)
    prompt = encode_prompt(tok, [{"role": "user", "content": "Q?"}])
    final = relevance_guided(prompt, policy, env, tok, RolloutConfig(max_obs_tokens=30),
                             TTSConfig(samples=4, iterations=3), random.Random(0))  # fmt: skip
    assert final == ["1858"] * 4 and policy.calls == [4, 4]
    assert env.counters.queries == 4 and env.counters.unique_queries == 1  # one retrieval for four branches


def test_relevance_guided_keeps_the_completion_budget_of_a_rollout(world, smollm2_path):
    """With the budget of a majority-vote rollout: a branch whose search turn and observation fill it ends
    unanswered (as a rollout ends `truncated`), and a turn is never longer than the room left. With every
    branch ended, the next iteration restarts from the root (the algorithm's empty branch set)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_path)
    env = SearchEnv(load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=1))
    prompt = encode_prompt(tok, [{"role": "user", "content": "Q?"}])
    rollout, tts = RolloutConfig(max_obs_tokens=30), TTSConfig(samples=4, iterations=3)
    wide = relevance_guided(prompt, AlwaysSearch(tok), env, tok, rollout, tts, random.Random(0), 400)
    assert wide == ["1858"] * 4  # room for search, observation and answer: as without a budget
    policy, before = AlwaysSearch(tok), env.counters.queries
    search = len(tok.encode("<search> born in </search>", add_special_tokens=False))
    final = relevance_guided(prompt, policy, env, tok, rollout, tts, random.Random(0), search + 5)
    # the observation filled each branch's budget; the second iteration's turns start at the root again
    assert final == ["1858"] * 4 and policy.calls == [4, 4]
    assert policy.max_new_tokens == [search + 5, search + 5]
    assert env.counters.queries - before == 4  # no branch searched past its budget


def test_questions_batched_together_stay_apart(world, smollm2_path):
    """`eval tts` generates several questions' samples together. Relevance-guided: one generate per iteration
    for both questions, but each question's searches are its own environment call (the same query is
    retrieved once per question, not once for both) and each keeps its own budget and answers, as when run
    alone. Majority vote: `lockstep_rollouts` with a group per question de-duplicates within a group only."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_path)
    env = SearchEnv(load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=1))
    prompt = encode_prompt(tok, [{"role": "user", "content": "Q?"}])
    rollout, tts = RolloutConfig(max_obs_tokens=30), TTSConfig(samples=4, iterations=3)
    search = len(tok.encode("<search> born in </search>", add_special_tokens=False))
    policy = AlwaysSearch(tok)
    finals = relevance_guided_batch([prompt, prompt], policy, env, tok, rollout, tts, random.Random(0), [400, search + 5])  # fmt: skip
    assert finals == [["1858"] * 4] * 2 and policy.calls == [8, 8]
    assert (env.counters.queries, env.counters.unique_queries) == (8, 2)
    for groups, unique in ((None, 1), ([0, 0, 1, 1], 2)):
        env = SearchEnv(load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=1))
        rs = lockstep_rollouts([prompt] * 4, AlwaysSearch(tok), env, tok, rollout, 400, groups)
        assert [parse_completion(tok.decode(r.completion_ids)).answer for r in rs] == ["1858"] * 4
        assert (env.counters.queries, env.counters.unique_queries) == (4, unique)
    with pytest.raises(ValueError, match="3 groups for 4 prompts"):
        lockstep_rollouts([prompt] * 4, AlwaysSearch(tok), env, tok, rollout, 400, [0, 0, 1])


def test_every_tts_arm_reads_a_rollout_as_the_format_parser_does(world, smollm2_path, scripted_policy):
    """An invalid first turn, then a turn that corrects its own answer: the majority-vote arms (whole
    rollouts, corrected) read 1859; the relevance-guided arm read the turn's first action, 1858, after
    dropping the invalid branch."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_path)
    env = SearchEnv(load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=1))
    prompt = encode_prompt(tok, [{"role": "user", "content": "Q?"}])
    script = ["Let me think first.", "<answer> 1858 </answer> no, <answer> 1859 </answer>"]
    rollout = RolloutConfig(max_turns=2, max_turn_tokens=32, max_obs_tokens=30)
    (r,) = lockstep_rollouts([prompt], scripted_policy(tok, script), env, tok, rollout, 200)
    naive = parse_completion(tok.decode(r.completion_ids, skip_special_tokens=True)).answer
    relevance = relevance_guided(prompt, scripted_policy(tok, script), env, tok, rollout,
                                 TTSConfig(samples=1, iterations=3), random.Random(0))  # fmt: skip
    assert (r.invalid_turns, naive, relevance) == (1, "1859", ["1859"])


def test_algorithm_pieces():
    assert shares(5, [(1.0, 0.0), (2.0, 0.0)]) == [2, 3]
    assert keep_probability(5.0, 5.0, 7.5) == 1.0 and keep_probability(2.5, 5.0, 1.0) == 0.5
    assert majority([]) == "" and majority(["", "x"]) == "x"
    with pytest.raises(ConfigError, match="strategies"):
        TTSConfig(strategies=["best_of_n"])
    with pytest.raises(ConfigError, match="exactly one of"):
        SearchConfig(index="a", retriever_url="b")
