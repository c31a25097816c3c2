"""Multi-turn rollouts, token-in/token-out: every environment piece lands in the completion exactly as its own
tokenization, with env_mask 0 and logprob 0; every policy token keeps its sampled id and logprob."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from r3forge.agent.data import load_agent_rows
from r3forge.agent.env import EnvConfig, SearchEnv
from r3forge.agent.rollout import (
    CORRECTION,
    Encoder,
    HFPolicy,
    RolloutConfig,
    encode_prompt,
    lockstep_rollouts,
)
from r3forge.retrieval import load_retriever


@pytest.fixture(scope="module")
def smol(smollm2_path):
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    return AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32).eval(), tokenizer


def runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """(value, start, end) of each maximal run of equal values."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((mask[start], start, i))
            start = i
    return out


def test_scripted_rollout_is_token_exact(world, smol, scripted_policy):
    _, tok = smol
    env = SearchEnv(load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=2))
    script = ["Let me look. <search> born in </search>", "hmm, not sure", "<answer> 1858 </answer>"]
    policy = scripted_policy(tok, script)
    config = RolloutConfig(max_turns=2, max_turn_tokens=64, max_obs_tokens=40)
    prompt = encode_prompt(tok, [{"role": "user", "content": "When was X born?"}])
    (r,) = lockstep_rollouts([prompt], policy, env, tok, config, max_completion_tokens=2000)

    enc = Encoder(tok)
    obs = r.observations[0]
    t1, t2, t3 = policy.turns
    expected = t1 + enc.observation(obs.text, 40) + t2 + tok.encode(CORRECTION, add_special_tokens=False) + t3
    expected += [tok.eos_token_id]
    assert r.completion_ids == expected
    assert len(r.env_mask) == len(r.logprobs) == len(r.completion_ids)
    assert [v for v, _, _ in runs(r.env_mask)] == [1, 0, 1, 0, 1, 0]
    for value, start, end in runs(r.env_mask):
        if value == 1:
            assert r.logprobs[start:end] == [-(1.0 + i) for i in range(end - start)]
        else:
            assert set(r.logprobs[start:end]) == {0.0}
    body = tok.encode(obs.text, add_special_tokens=False)
    assert len(body) > 40  # the observation was cut to its token budget
    assert r.searches == ["born in"] and r.invalid_turns == 1 and r.finish == "answer" and r.turns == 3


def test_budget_truncates_without_eos(world, smol, scripted_policy):
    _, tok = smol
    env = SearchEnv(load_retriever(world["index"]), None, EnvConfig(observation="raw"))
    policy = scripted_policy(tok, ["<search> born in </search>", "<answer> x </answer>"])
    prompt = encode_prompt(tok, [{"role": "user", "content": "Q?"}])
    (r,) = lockstep_rollouts([prompt], policy, env, tok, RolloutConfig(max_turns=1), max_completion_tokens=30)
    assert (
        r.finish == "truncated" and len(r.completion_ids) == 30 and r.completion_ids[-1] != tok.eos_token_id
    )
    assert len(r.env_mask) == len(r.logprobs) == 30


def test_final_turn_does_not_search(world, smol, scripted_policy):
    _, tok = smol
    env = SearchEnv(load_retriever(world["index"]), None, EnvConfig(observation="raw"))
    policy = scripted_policy(tok, ["<search> a </search>", "<search> b </search>"])
    prompt = encode_prompt(tok, [{"role": "user", "content": "Q?"}])
    (r,) = lockstep_rollouts(
        [prompt], policy, env, tok, RolloutConfig(max_turns=1), max_completion_tokens=4000
    )
    assert r.searches == ["a"] and r.finish == "final" and r.completion_ids[-1] == tok.eos_token_id
    assert r.env_mask[-1] == 0


def test_real_policy_logprobs_match_a_forward_pass_over_the_kept_ids(world, smol, fp32):
    """Sampling with the embedded model: the policy tokens' logprobs are those of the model reading the
    completion's own ids (no re-tokenization anywhere), and masked runs are exactly environment pieces."""
    model, tok = smol
    torch.manual_seed(0)
    rows = load_agent_rows(str(world["questions"]), "all", 0.0, "raw", limit=3, example=True)
    env = SearchEnv(
        load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=1, doc_max_words=20)
    )
    policy = HFPolicy(model, tok, temperature=1.0, top_p=1.0, batch_size=4)
    config = RolloutConfig(max_turns=1, max_turn_tokens=24, max_obs_tokens=32)
    rollouts = lockstep_rollouts(
        [encode_prompt(tok, r["prompt"]) for r in rows], policy, env, tok, config, 200
    )
    enc = Encoder(tok)
    pieces = {tuple(enc.correction), (tok.eos_token_id,)}
    for r in rollouts:
        assert len(r.env_mask) == len(r.logprobs) == len(r.completion_ids) > 0
        obs = iter(r.observations)
        for value, start, end in runs(r.env_mask):
            if value == 0:
                piece = tuple(r.completion_ids[start:end])
                if piece[: len(enc.open)] == tuple(enc.open):  # an observation, maybe followed by the EOS
                    expected = tuple(enc.observation(next(obs).text, 32))
                    assert piece[: len(expected)] == expected
                    piece = piece[len(expected) :]
                while piece:
                    match = next(p for p in pieces if piece[: len(p)] == p)
                    piece = piece[len(match) :]
        ids = torch.tensor([r.prompt_ids + r.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(r.prompt_ids) - 1 : -1].float()  # [C, V]
        logps = logits.log_softmax(-1).gather(-1, ids[0, len(r.prompt_ids) :, None]).squeeze(-1)
        policy_at = torch.tensor(r.env_mask, dtype=torch.bool)
        # sampled in a padded batch with a KV cache vs one teacher-forced pass: two fp32 forwards that sum in
        # other orders, 2·sqrt(L·k)·u·max|logit| (~9e-4); a logprob of the wrong position or of a retokenized
        # id is off by > 1e-2
        atol = fp32.atol(logits.abs().max(), fp32.forward_length(model.config))
        assert torch.allclose(logps[policy_at], torch.tensor(r.logprobs)[policy_at], atol=atol, rtol=0)
