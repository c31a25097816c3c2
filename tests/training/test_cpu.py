"""`compact_cpu_lm_head`: TRL's fused LM head on CPU scores only the labelled positions, with the same loss,
gradient and logged per-token fields as TRL's every-position path (the embedded model, a completion-only
batch of two rows with different prompt lengths). `cpu_lm_head_tiles`: smaller tiles, the same fields."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import trl.kernels.chunked_logprob as trl_logprob
import trl.trainer.utils as trl_utils
from transformers import AutoModelForCausalLM

from r3forge.training.cpu import compact_cpu_lm_head, cpu_lm_head_tiles


@pytest.fixture
def fused_model(smollm2_path: Path, monkeypatch: pytest.MonkeyPatch):
    # TRL's own compaction check, also when an in-process SFT run applied the patch before; restored after
    check = trl_utils._use_triton
    monkeypatch.setattr(trl_utils, "_use_triton", getattr(check, "r3forge_original", check))
    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    return model


def step(model, ids: torch.Tensor, labels: torch.Tensor):
    """One fused-head forward and backward: the outputs and the LM head's gradient."""
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=labels, fused_lm_head=True)
    out.loss.backward()
    return out, model.get_output_embeddings().weight.grad.clone()


def assert_same_fields(out, grad, ref, ref_grad, model, ids: torch.Tensor, fp32) -> None:
    """The loss, the logged per-token fields and the head's gradient agree to fp32 rounding (tests/conftest.py
    `Fp32`; measured in tests/TOLERANCES.md). The two paths run the same ops in other tiles: log Z and the
    entropy's E[z] are sums over the V = 49k vocabulary folded tile by tile (terms up to the largest |logit|),
    and the gradient of the head, tied to the input embedding, sums over V once more into the hidden states'
    gradient and then runs back through the network. A real bug is orders of magnitude larger: a vocabulary
    tile left out or merged with the wrong rescale moves log Z by ~1e-2 to 10; a token dropped or counted
    twice moves the gradient by 1/N of its size (N = 21 and 40 labels here: 5%, 2.5%)."""
    vocab = model.config.vocab_size
    with torch.no_grad():
        max_logit = model(input_ids=ids).logits.abs().max()
    fields = fp32.atol(max_logit, vocab)  # 2·sqrt(V)·u·max|z| ≈ 6e-4 at |z| ≈ 25
    torch.testing.assert_close(out.loss, ref.loss, atol=fields, rtol=0)  # a mean of the log-probs
    for name in ("log_probs", "entropy"):
        torch.testing.assert_close(getattr(out, name), getattr(ref, name), atol=fields, rtol=0)
    # exact: a max and comparisons of the same logits (dot products of the same length, 576: bitwise equal
    # tiles here; elsewhere a flip needs the target within rounding of the top logit)
    assert torch.equal(out.is_top1, ref.is_top1)
    # the vocabulary sum into the hidden states' gradient, then the backward chain of the network:
    # 2·sqrt(V + L·k)·u·max|grad| ≈ 620·u·max|grad| (≈ 5e-5 here)
    atol = fp32.atol(ref_grad.abs().max(), vocab + fp32.forward_length(model.config))
    torch.testing.assert_close(grad, ref_grad, atol=atol, rtol=0)


def test_compact_cpu_lm_head_scores_the_labelled_positions_only(
    fused_model, monkeypatch: pytest.MonkeyPatch, fp32
):
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, fused_model.config.vocab_size, (2, 40), generator=gen)  # (B, T)
    labels = ids.clone()
    labels[0, :30] = -100  # prompt of row 0
    labels[1, :25] = -100  # prompt of row 1, and right padding
    labels[1, 36:] = -100
    scored: list[int] = []  # rows the head projected per call
    apply = trl_utils._ChunkedLogProbFunction.apply

    def counting(hidden, *args):
        scored.append(hidden.shape[0])
        return apply(hidden, *args)

    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply", counting)

    every, every_grad = step(fused_model, ids, labels)
    assert compact_cpu_lm_head()
    assert not compact_cpu_lm_head()  # applied once
    compact, compact_grad = step(fused_model, ids, labels)
    labelled = int((labels[:, 1:] != -100).sum())  # 10 + 11 next-token labels
    assert scored == [2 * 39, labelled]
    assert_same_fields(compact, compact_grad, every, every_grad, fused_model, ids, fp32)
    assert trl_utils._use_triton(torch.device("cpu"))


def test_cpu_lm_head_tiles_bound_the_tile_and_keep_the_log_probs(
    fused_model, monkeypatch: pytest.MonkeyPatch, fp32
):
    # TRL's tile sizes restored after the test (the setting is process-wide)
    monkeypatch.setattr(trl_logprob, "TOKEN_CHUNK_SIZE", trl_logprob.TOKEN_CHUNK_SIZE)
    monkeypatch.setattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE", trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, fused_model.config.vocab_size, (2, 40), generator=gen)  # (B, T)
    labels = ids.clone()
    labels[:, :20] = -100
    buffers: list[tuple[int, int]] = []  # the [tokens, vocab] tile of each kernel call
    empty = torch.empty

    def recording(*size, **kwargs):
        if len(size) == 1 and isinstance(size[0], tuple) and len(size[0]) == 2:
            buffers.append(size[0])
        return empty(*size, **kwargs)

    trl_out, trl_grad = step(fused_model, ids, labels)
    assert cpu_lm_head_tiles(16, 1000)
    monkeypatch.setattr(trl_logprob.torch, "empty", recording)
    tiled, tiled_grad = step(fused_model, ids, labels)
    monkeypatch.setattr(trl_logprob.torch, "empty", empty)
    assert buffers and all(b[0] <= 16 and b[1] == 1000 for b in buffers)  # forward and backward tiles
    assert_same_fields(tiled, tiled_grad, trl_out, trl_grad, fused_model, ids, fp32)
