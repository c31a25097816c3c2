"""Bi-encoder and cross-encoder rerankers on the embedded MiniLM: batched scores equal per-pair scores."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import CrossEncoder

from r3forge.errors import ConfigError
from r3forge.rerank import (
    BiEncoderConfig,
    BiEncoderReranker,
    Candidate,
    CrossEncoderConfig,
    CrossEncoderReranker,
    Reranker,
    order,
    passage,
)

QUESTIONS = ["What is the capital of France?", "Who wrote the play Hamlet?"]
PARIS = Candidate("paris", "Paris", "Paris is the capital and largest city of France.")
HAMLET = Candidate("hamlet", "Hamlet", "Hamlet is a tragedy written by William Shakespeare.")
TULIP = Candidate("tulip", "Tulip", "The tulip is a flowering plant of the lily family.")
CANDIDATES = [[TULIP, HAMLET, PARIS], [PARIS, TULIP, HAMLET]]


def test_bi_encoder_cosine(minilm_path: Path, fp32) -> None:
    reranker = BiEncoderReranker.from_config(BiEncoderConfig(encoder=str(minilm_path), batch_size=2))
    assert isinstance(reranker, Reranker)
    outs = reranker.rerank(QUESTIONS, CANDIDATES)
    assert [order(o)[0] for o in outs] == [2, 2]  # Paris for the capital, Hamlet for the author
    q = reranker.model.encode(QUESTIONS[1], normalize_embeddings=True)
    d = reranker.model.encode(passage(PARIS), normalize_embeddings=True)
    # two unit vectors, each from two fp32 forwards that sum in other orders (a padded batch of 2 vs one
    # text): |Δ cos| <= |Δq| + |Δd|, each 2·sqrt(L·k)·u (~1e-5); an unnormalized vector, another pooling
    # or the wrong passage moves the cosine by > 1e-2
    atol = 2 * fp32.atol(1.0, fp32.forward_length(reranker.model[0].auto_model.config))
    assert outs[1].scores[0] == pytest.approx(float(q @ d), abs=atol)
    assert all(-1.0 <= s <= 1.0 for o in outs for s in o.scores)
    assert reranker.rerank(["q"], [[]])[0].scores == []


def test_cross_encoder_logits(minilm_path: Path, tmp_path: Path, fp32) -> None:
    # an untrained one-logit head on MiniLM: enough to test the mechanics (`test_train_cross` trains one)
    CrossEncoder(str(minilm_path), num_labels=1).save_pretrained(str(tmp_path / "ce"))
    reranker = CrossEncoderReranker.from_config(CrossEncoderConfig(model=str(tmp_path / "ce"), batch_size=4))
    outs = reranker.rerank(QUESTIONS, CANDIDATES)
    assert [len(o.scores) for o in outs] == [3, 3] and np.isfinite([o.scores for o in outs]).all()
    single = reranker.model.predict([(QUESTIONS[0], passage(PARIS))], activation_fn=lambda x: x)
    # the logit is w · tanh(pooler(CLS)): terms bounded by |w|·sqrt(hidden), each from two fp32 forwards
    # that sum in other orders (a padded batch of 4 vs one pair): 2·sqrt(L·k)·u times that (~1e-5); another
    # pair's or the passage-first pair's logit differs by > 1e-2
    bert = reranker.model.model
    scale = bert.classifier.weight.norm().item() * math.sqrt(bert.config.hidden_size)
    atol = fp32.atol(scale, fp32.forward_length(bert.config))
    assert outs[0].scores[2] == pytest.approx(float(single[0]), abs=atol)
    assert [o.scores for o in reranker.rerank(["q", "r"], [[], []])] == [[], []]
    with pytest.raises(ConfigError, match="cannot load cross-encoder"):
        CrossEncoderReranker.from_config(CrossEncoderConfig(model=str(tmp_path / "missing")))
