"""The packed, mask-aware GRPO step (agent/packed.py) against TRL's padded step, on recorded multi-turn
rollouts of the embedded model (observations inside, lengths made very different): the same per-token
log-probabilities and entropies under the loss mask, the same loss for every loss type TRL has, the same
gradients; fewer tokens through the backbone, the head only at policy tokens, and a budget smaller than a
rollout refused by name."""

from __future__ import annotations

import datasets
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from r3forge.agent.config import PAPER_DEFAULTS
from r3forge.agent.data import load_agent_rows
from r3forge.agent.env import EnvConfig, SearchEnv
from r3forge.agent.grpo import IS_LEVELS, LOSS_TYPES, AgentRollout
from r3forge.agent.packed import PackedGRPOTrainer, pack
from r3forge.agent.reward import answer_reward, format_reward
from r3forge.agent.rollout import RolloutConfig
from r3forge.errors import ConfigError
from r3forge.retrieval import load_retriever
from r3forge.training.cpu import compact_cpu_lm_head


@pytest.fixture(scope="module")
def trainer(world, smollm2_path, tmp_path_factory):
    compact_cpu_lm_head()  # the recipe's CPU setting: TRL's head scores only labelled positions
    tok = AutoTokenizer.from_pretrained(smollm2_path)
    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    rows = load_agent_rows(str(world["questions"]), "all", 0.0, "raw", limit=4, example=True)
    env = SearchEnv(
        load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=1, doc_max_words=20)
    )
    rollout = AgentRollout(env, tok, RolloutConfig(max_turns=2, max_turn_tokens=24, max_obs_tokens=40), 8)
    args = GRPOConfig(**(PAPER_DEFAULTS | dict(
        output_dir=str(tmp_path_factory.mktemp("packed")), per_device_train_batch_size=4, num_generations=2,
        max_completion_length=120, max_steps=1, use_cpu=True, bf16=False, learning_rate=1e-5, report_to="none",
        logging_steps=1, save_strategy="no", seed=0, reward_weights=[1.0, 0.0])))  # fmt: skip
    return PackedGRPOTrainer(model=model, reward_funcs=[answer_reward, format_reward], args=args,
                             train_dataset=datasets.Dataset.from_list(rows), processing_class=tok,
                             rollout_func=rollout)  # fmt: skip


@pytest.fixture(scope="module")
def recorded(trainer):
    """Four real rollouts (two prompts x 2, with observations), generated and scored once, then cut so the
    lengths differ: the first rollout with an observation ends one policy token after it, another ends 8
    tokens into its first turn (TRL pads: 1 = tool_mask's padding)."""
    torch.manual_seed(0)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    inputs = trainer._generate_and_score_completions([trainer.train_dataset[i] for i in (0, 0, 1, 1)])
    mask = inputs["completion_mask"] * inputs["tool_mask"]  # [B, C]
    env = inputs["completion_mask"] - mask  # [B, C] observation tokens
    searched = [b for b in range(len(mask)) if env[b].any() and mask[b, int(env[b].nonzero()[0]) :].any()]
    assert searched, "no rollout searched and went on after the observation"
    row, short = searched[0], next(b for b in range(len(mask)) if b != searched[0])
    first_env = int(env[row].nonzero()[0])
    after = int((mask[row, first_env:] == 1).nonzero()[0])  # its first policy token after the observation
    inputs = dict(inputs)
    for key, fill in (
        ("completion_ids", trainer.processing_class.pad_token_id),
        ("completion_mask", 0),
        ("tool_mask", 1),
    ):
        inputs[key] = inputs[key].clone()
        inputs[key][row, first_env + after + 1 :] = fill  # its first turn, observation and one policy token
        inputs[key][short, 8:] = fill
    inputs["advantages"] = torch.tensor([-1.0, -0.2, 0.4, 1.0])
    return inputs


def padded_step(trainer, monkeypatch):
    """Score with TRL's own padded method."""
    method = GRPOTrainer._get_per_token_logps_and_entropies.__get__(trainer)
    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", method)


def both(trainer, inputs, fn, monkeypatch):
    """fn(trainer, inputs) with the packed step, then with TRL's padded one."""
    packed = fn(trainer, inputs)
    with monkeypatch.context() as m:
        padded_step(trainer, m)
        return packed, fn(trainer, inputs)


def logps_and_entropy(trainer, inputs):
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)  # [B, P + C]
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    trainer._score_mask = inputs["completion_mask"] * inputs["tool_mask"]  # as in _compute_loss
    try:
        with torch.no_grad():
            logps, ent, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, att, inputs["completion_ids"].shape[1], compute_entropy=True
            )
    finally:
        trainer._score_mask = None
    return logps, ent


def tolerance(trainer, inputs, fp32):
    """Two fp32 forwards of one token (other batch shape, other RoPE offset: TRL's left padding starts a
    prompt at position > 0, rotary attention is invariant to that up to rounding): 2·sqrt(L·k)·u·max|logit|;
    a log-prob and the entropy (a softmax average of log-probs) move by at most twice that."""
    with torch.no_grad():
        row = torch.cat([inputs["prompt_ids"][1], inputs["completion_ids"][1]])[None]
        scale = trainer.model(input_ids=row).logits.abs().max()
    return 2 * fp32.atol(scale, fp32.forward_length(trainer.model.config))


def test_same_logprobs_and_entropies_under_the_mask(trainer, recorded, monkeypatch, fp32):
    mask = (recorded["completion_mask"] * recorded["tool_mask"]).bool()  # [B, C]
    lengths = recorded["completion_mask"].sum(1).tolist()  # [B] the rollouts' tokens
    assert max(lengths) > 4 * min(lengths), lengths
    (lp, ent), (lp_ref, ent_ref) = both(trainer, recorded, logps_and_entropy, monkeypatch)
    atol = tolerance(trainer, recorded, fp32)
    print("logp", atol, (lp - lp_ref)[mask].abs().max(), (ent - ent_ref)[mask].abs().max())
    assert torch.allclose(lp[mask], lp_ref[mask], atol=atol, rtol=0), (lp - lp_ref)[mask].abs().max()
    assert torch.allclose(ent[mask], ent_ref[mask], atol=atol, rtol=0), (ent - ent_ref)[mask].abs().max()
    # nothing was scored outside the mask (the padded step scores every completion token there)
    assert not lp[~mask].any() and not ent[~mask].any()
    assert lp_ref[~mask & recorded["completion_mask"].bool()].any()


def test_fewer_tokens_and_head_positions_than_the_padded_step(trainer, recorded):
    ids = torch.cat([recorded["prompt_ids"], recorded["completion_ids"]], 1)
    att = torch.cat([recorded["prompt_mask"], recorded["completion_mask"]], 1)
    mask = recorded["completion_mask"] * recorded["tool_mask"]
    rows = pack(ids, att, mask, budget=None)
    assert sum(r.tokens for r in rows) == int(att.sum()) < ids.numel()  # real tokens only
    assert (
        sum(len(torch.cat(r.src)) for r in rows) == int(mask.sum()) < int(recorded["completion_mask"].sum())
    )
    # a budget of twice the longest rollout packs them in pairs
    assert len(pack(ids, att, mask, budget=2 * int(att.sum(1).max()))) == len(ids) // 2


def test_a_budget_below_one_rollout_is_refused_by_name(recorded):
    ids = torch.cat([recorded["prompt_ids"], recorded["completion_ids"]], 1)
    att = torch.cat([recorded["prompt_mask"], recorded["completion_mask"]], 1)
    with pytest.raises(ConfigError, match=r"max_tokens_per_microbatch: 64 is shorter than a rollout of \d+"):
        pack(ids, att, recorded["completion_mask"], budget=64)


def test_values_outside_the_mask_never_reach_the_loss(trainer, recorded, monkeypatch):
    """The packed step leaves zeros where the padded one has real log-probs and entropies (observation
    tokens, padding): for every loss type TRL has, the loss from the padded step's values equals the loss from
    the same values zeroed outside the mask, exactly (TRL multiplies each such term by the mask's 0 before any
    sum, and the sums then add the same numbers in the same order)."""
    mask = recorded["completion_mask"] * recorded["tool_mask"]  # [B, C]
    with monkeypatch.context() as m:
        padded_step(trainer, m)
        lp, ent = logps_and_entropy(trainer, recorded)
    # an old policy and a reference other than the policy, so ratios, clipping and the KL take part, with
    # noise where the mask is 0
    noise = torch.randn(mask.shape, generator=torch.Generator().manual_seed(0)) * (1 - mask)
    shift = torch.linspace(-0.3, 0.3, mask.numel()).view(mask.shape) * mask
    inputs = dict(recorded, old_per_token_logps=lp + shift + noise, ref_per_token_logps=lp - shift - noise)
    for loss_type in LOSS_TYPES:
        monkeypatch.setattr(trainer, "loss_type", loss_type)
        monkeypatch.setattr(trainer, "importance_sampling_level", IS_LEVELS.get(loss_type, "token"))
        losses = []
        for values in ((lp, ent), (lp * mask, ent * mask)):
            monkeypatch.setattr(
                trainer, "_get_per_token_logps_and_entropies", lambda *a, v=values, **k: (*v, None)
            )
            losses.append(trainer.compute_loss(trainer.model, dict(inputs)).item())
        assert losses[0] == losses[1], loss_type


def test_the_loss_and_gradients_are_the_padded_steps(trainer, recorded, monkeypatch, fp32):
    """One backward of the paper's loss (bnpo, with the KL) each way. Every log-prob and its gradient
    (onehot - softmax, through the head in fp32) carry the forward's rounding, ~sqrt(L·k)·u·max|logit|
    relative; the loss (a masked token mean with derivatives <= max|A|·coef + beta·|k3'| ~ 1 at the first
    update) and the gradient (a linear map of those per-token gradients, compared as one vector: ||g - g_ref||
    / ||g_ref||) move by that much: measured 4e-5 against a bound of ~1e-3. Dropping one policy token from
    the loss moves the gradient by several times the bound (asserted), so the test sees a token masked or
    scored wrongly."""
    model = trainer.model

    def loss_and_grads(trainer, inputs):
        model.zero_grad()
        loss = trainer.compute_loss(model, dict(inputs))
        loss.backward()
        return loss.item(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    monkeypatch.setattr(trainer, "loss_type", "bnpo")
    (loss, g), (loss_ref, g_ref) = both(trainer, recorded, loss_and_grads, monkeypatch)
    atol = tolerance(trainer, recorded, fp32) / 2  # one forward's rounding relative to O(1) gradients
    assert loss == pytest.approx(loss_ref, abs=atol)
    assert g.shape == g_ref.shape and g_ref.norm() > 0
    assert (g - g_ref).norm() / g_ref.norm() < atol
    mask = recorded["completion_mask"] * recorded["tool_mask"]
    row = int(mask.sum(1).argmax())
    one_less = dict(recorded, tool_mask=recorded["tool_mask"].clone())
    one_less["tool_mask"][row, int(mask[row].nonzero()[-1])] = 0  # its last policy token
    _, g_less = loss_and_grads(trainer, one_less)
    model.zero_grad()
    assert (g_less - g_ref).norm() / g_ref.norm() > 3 * atol
