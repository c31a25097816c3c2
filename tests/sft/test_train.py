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

from r3forge.sft.train import compact_cpu_lm_head, cpu_lm_head_tiles


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


def assert_same_fields(out, grad, ref, ref_grad) -> None:
    """The loss, the logged per-token fields and the head's gradient agree to float rounding."""
    torch.testing.assert_close(out.loss, ref.loss, atol=1e-5, rtol=1e-5)
    for name in ("log_probs", "entropy", "is_top1"):
        torch.testing.assert_close(getattr(out, name), getattr(ref, name), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grad, ref_grad, atol=1e-6, rtol=1e-4)


def test_compact_cpu_lm_head_scores_the_labelled_positions_only(fused_model, monkeypatch: pytest.MonkeyPatch):
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
    assert_same_fields(compact, compact_grad, every, every_grad)
    assert trl_utils._use_triton(torch.device("cpu"))


def test_cpu_lm_head_tiles_bound_the_tile_and_keep_the_log_probs(
    fused_model, monkeypatch: pytest.MonkeyPatch
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
    assert_same_fields(tiled, tiled_grad, trl_out, trl_grad)
