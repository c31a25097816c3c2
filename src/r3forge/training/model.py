"""The model a training recipe starts from, in its training precision (SFT's student, GRPO's policy)."""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import ModelConfig

from r3forge.models import resolve_model


def model_dtype(model_args: ModelConfig, training: Any) -> torch.dtype:
    """`dtype: auto` (or unset): bf16 when training in bf16 on a GPU, else fp32."""
    if model_args.dtype and model_args.dtype != "auto":
        return getattr(torch, model_args.dtype)
    return torch.bfloat16 if training.bf16 and torch.cuda.is_available() else torch.float32


def load_model(model_args: ModelConfig, training: Any) -> tuple[str, Any, Any]:
    """(base name, model, tokenizer) of a training run: an embedded name (default SmolLM2), a local folder or
    a Hub id, in the training precision (`model_dtype`); the tokenizer pads with EOS when it has no pad."""
    base = model_args.model_name_or_path or "smollm2-135m-instruct"
    path = resolve_model(base)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=model_dtype(model_args, training), attn_implementation=model_args.attn_implementation
    )
    return base, model, tokenizer
