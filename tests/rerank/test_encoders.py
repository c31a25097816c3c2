"""Bi-encoder and cross-encoder rerankers on the embedded MiniLM: batched scores equal per-pair scores."""

from __future__ import annotations

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


def test_bi_encoder_cosine(minilm_path: Path) -> None:
    reranker = BiEncoderReranker.from_config(BiEncoderConfig(encoder=str(minilm_path), batch_size=2))
    assert isinstance(reranker, Reranker)
    outs = reranker.rerank(QUESTIONS, CANDIDATES)
    assert [order(o)[0] for o in outs] == [2, 2]  # Paris for the capital, Hamlet for the author
    q = reranker.model.encode(QUESTIONS[1], normalize_embeddings=True)
    d = reranker.model.encode(passage(PARIS), normalize_embeddings=True)
    assert outs[1].scores[0] == pytest.approx(float(q @ d), abs=1e-5)
    assert all(-1.0 <= s <= 1.0 for o in outs for s in o.scores)
    assert reranker.rerank(["q"], [[]])[0].scores == []


def test_cross_encoder_logits(minilm_path: Path, tmp_path: Path) -> None:
    # an untrained one-logit head on MiniLM: enough to test the mechanics (`test_train_cross` trains one)
    CrossEncoder(str(minilm_path), num_labels=1).save_pretrained(str(tmp_path / "ce"))
    reranker = CrossEncoderReranker.from_config(CrossEncoderConfig(model=str(tmp_path / "ce"), batch_size=4))
    outs = reranker.rerank(QUESTIONS, CANDIDATES)
    assert [len(o.scores) for o in outs] == [3, 3] and np.isfinite([o.scores for o in outs]).all()
    single = reranker.model.predict([(QUESTIONS[0], passage(PARIS))], activation_fn=lambda x: x)
    assert outs[0].scores[2] == pytest.approx(float(single[0]), abs=1e-4)
    assert [o.scores for o in reranker.rerank(["q", "r"], [[], []])] == [[], []]
    with pytest.raises(ConfigError, match="cannot load cross-encoder"):
        CrossEncoderReranker.from_config(CrossEncoderConfig(model=str(tmp_path / "missing")))
