"""transformers backend on the embedded model: padding-invariance, logprobs vs a forward pass, stops.

This CPU is slow (~0.3 s per generated token), so tests share one batched generation (`hf_parity`)."""

from __future__ import annotations

import torch

from r3forge.backends import GenerationBackend, GenerationRequest, GenerationResult, HFLocalBackend


def chat(question: str, **kwargs) -> GenerationRequest:
    return GenerationRequest(messages=[{"role": "user", "content": question}], **kwargs)


def test_batched_left_padding_matches_one_by_one(
    hf_backend: HFLocalBackend,
    parity_requests: list[GenerationRequest],
    hf_parity: list[GenerationResult],
    fp32,
):
    assert isinstance(hf_backend, GenerationBackend)
    assert len({len(r.prompt_token_ids) for r in hf_parity}) > 1  # the batch really was padded
    (alone,) = hf_backend.generate([parity_requests[3]])  # the raw prompt: the shortest, most padding
    a, b = hf_parity[3].choices[0], alone.choices[0]
    assert a.token_ids == b.token_ids and a.text == b.text
    # two fp32 forwards that sum in other orders (padded batch vs one row): 2·sqrt(L·k)·u·max|logit|
    # (~9e-4 at |logit| ≈ 35); attending a pad token or a shifted position moves logprobs by > 1e-2
    with torch.no_grad():
        scale = hf_backend.model(torch.tensor([alone.prompt_token_ids + b.token_ids])).logits.abs().max()
    atol = fp32.atol(scale, fp32.forward_length(hf_backend.model.config))
    assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) <= atol


def test_logprobs_match_a_teacher_forced_forward_pass(
    hf_backend: HFLocalBackend,
    parity_requests: list[GenerationRequest],
    hf_parity: list[GenerationResult],
    fp32,
):
    """Chosen-token logprobs and top-k are those of the raw distribution at each generated position."""
    k = parity_requests[2].top_logprobs
    result = hf_parity[2]
    choice = result.choices[0]
    ids = torch.tensor([result.prompt_token_ids + choice.token_ids])  # [1, P + T]
    with torch.no_grad():
        logits = hf_backend.model(ids).logits[0].float()  # [P + T, V]
    p = len(result.prompt_token_ids)
    expected = logits[p - 1 : -1].log_softmax(-1)  # [T, V]: position p-1+t predicts generated token t
    # a padded batch with a KV cache vs one teacher-forced pass: the same fp32 bound as above (~9e-4); a
    # logprob of the wrong position or of processed (temperature, top-p) logits is off by > 1e-2
    atol = fp32.atol(logits[p - 1 : -1].abs().max(), fp32.forward_length(hf_backend.model.config))
    for t, token in enumerate(choice.token_ids):
        assert abs(choice.logprobs[t] - expected[t, token].item()) <= atol
        values = expected[t].topk(k).values
        # the same ids, best first, each with the teacher-forced logprob (ids within atol of each other may swap)
        got = torch.tensor(list(choice.top_logprobs[t].values()))
        assert torch.allclose(got, values, atol=atol, rtol=0)
        assert torch.allclose(expected[t, list(choice.top_logprobs[t])], values, atol=atol, rtol=0)
        assert expected[t, token] >= values[0] - atol  # greedy picks the argmax (or a tie within atol)
    assert result.usage.prompt_tokens == p and result.usage.completion_tokens == len(choice.token_ids)


def test_stops_eos_and_length(hf_backend: HFLocalBackend, hf_parity: list[GenerationResult]):
    (stopped,) = hf_backend.generate(
        [GenerationRequest(prompt="The capital of France is", max_tokens=12, stop=("\n",))]
    )
    s = stopped.choices[0]
    assert s.finish_reason == "stop" and "\n" not in s.text and s.text.strip() == "Paris."
    assert hf_backend.tokenizer.decode(s.token_ids[-1:]) == "\n"  # the token that completed the stop string
    eos = hf_backend.tokenizer.eos_token_id
    e = hf_parity[0].choices[0]  # "What is the capital of France?" ends with EOS within 12 tokens
    assert e.finish_reason == "stop" and e.token_ids[-1] == eos and eos not in e.token_ids[:-1]
    assert "Paris" in e.text and "<|im_end|>" not in e.text
    n = hf_parity[2].choices[0]  # the haiku runs into max_tokens
    assert n.finish_reason == "length" and len(n.token_ids) == 12 and eos not in n.token_ids


def test_n_choices_sampling_and_greedy(hf_backend: HFLocalBackend):
    sampled = chat("Name three colors.", n=3, temperature=1.0, max_tokens=4, seed=1)
    (first,) = hf_backend.generate([sampled])
    (again,) = hf_backend.generate([sampled])
    assert len(first.choices) == 3
    assert [c.token_ids for c in first.choices] == [c.token_ids for c in again.choices]  # seeded
    assert len({tuple(c.token_ids) for c in first.choices}) > 1  # the 3 samples differ
    (greedy,) = hf_backend.generate([chat("Name three colors.", n=2, max_tokens=4)])
    assert greedy.choices[0].token_ids == greedy.choices[1].token_ids
    assert greedy.usage.completion_tokens == 2 * len(greedy.choices[0].token_ids)
