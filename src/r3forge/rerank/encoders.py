"""Encoder rerankers: a bi-encoder (cosine of sentence embeddings) and a cross-encoder (one score per pair).

    bi = BiEncoderReranker.from_config(BiEncoderConfig())                       # embedded all-MiniLM-L6-v2
    cross = CrossEncoderReranker.from_config(CrossEncoderConfig(model="runs/rerank/cross_minilm_hotpotqa"))

No pretrained cross-encoder ships with r3forge: `r3forge train-cross-encoder` (`train_cross.py`) trains one
from the embedded MiniLM on HotpotQA-format gold labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from sentence_transformers import CrossEncoder, SentenceTransformer

from r3forge.errors import ConfigError
from r3forge.models import resolve_model
from r3forge.rerank.base import Candidate, RerankOutput, check_inputs, flat_pairs, passage, split_flat
from r3forge.retrieval.dense import encode, load_encoder


@dataclass
class BiEncoderConfig:
    encoder: str = field(
        default="all-minilm-l6-v2",
        metadata={"help": "sentence-transformers encoder: embedded short name, local folder or Hub id."},
    )
    device: str | None = field(default=None, metadata={"help": "Encoder device (cpu, cuda); default: auto."})
    batch_size: int = field(default=64, metadata={"help": "Texts per encoder forward pass."})
    max_seq_length: int | None = field(
        default=None, metadata={"help": "Truncate inputs to this many tokens (default: the encoder's)."}
    )
    query_prefix: str = field(default="", metadata={"help": "Prepended to every question (e5: 'query: ')."})
    passage_prefix: str = field(
        default="", metadata={"help": "Prepended to every passage (e5: 'passage: ')."}
    )

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"BiEncoderConfig.batch_size must be >= 1, got {self.batch_size}")


class BiEncoderReranker:
    """Cosine similarity of the question's and each passage's (normalized) embeddings."""

    name = "bi_encoder"

    def __init__(self, model: SentenceTransformer, config: BiEncoderConfig | None = None):
        self.model, self.config = model, config or BiEncoderConfig()

    @classmethod
    def from_config(cls, config: BiEncoderConfig) -> BiEncoderReranker:
        return cls(load_encoder(config.encoder, config.device, config.max_seq_length), config)

    def rerank(
        self, questions: Sequence[str], candidates: Sequence[Sequence[Candidate]]
    ) -> list[RerankOutput]:
        check_inputs(questions, candidates, "BiEncoderReranker")
        c = self.config
        pairs = flat_pairs(questions, candidates)
        unique_q = list(dict.fromkeys(questions))
        q_emb = encode(self.model, [c.query_prefix + q for q in unique_q], c.batch_size, True)  # [Q, D]
        p_emb = encode(self.model, [c.passage_prefix + passage(d) for _, d in pairs], c.batch_size, True)
        row = {q: i for i, q in enumerate(unique_q)}
        q_rows = np.array([row[q] for q, _ in pairs], dtype=np.int64)  # [P]
        cosine = (q_emb[q_rows] * p_emb).sum(axis=1) if pairs else np.zeros(0)  # [P]
        return [RerankOutput(scores) for scores in split_flat(cosine.tolist(), candidates)]


@dataclass
class CrossEncoderConfig:
    model: str = field(
        metadata={"help": "A cross-encoder folder (e.g. from `r3forge train-cross-encoder`) or Hub id."},
    )
    device: str | None = field(default=None, metadata={"help": "Device (cpu, cuda); default: auto."})
    batch_size: int = field(default=32, metadata={"help": "(question, passage) pairs per forward pass."})
    max_length: int | None = field(
        default=None, metadata={"help": "Truncate each pair to this many tokens (default: the model's)."}
    )

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"CrossEncoderConfig.batch_size must be >= 1, got {self.batch_size}")


class CrossEncoderReranker:
    """A cross-encoder's raw logit for each (question, passage) pair (no sigmoid: no saturated ties)."""

    name = "cross_encoder"

    def __init__(self, model: CrossEncoder, config: CrossEncoderConfig):
        self.model, self.config = model, config

    @classmethod
    def from_config(cls, config: CrossEncoderConfig) -> CrossEncoderReranker:
        try:
            model = CrossEncoder(
                resolve_model(config.model), device=config.device, max_length=config.max_length
            )
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"CrossEncoderConfig.model: cannot load cross-encoder {config.model!r}: {e}"
            ) from e
        if model.num_labels != 1:
            raise ConfigError(
                f"CrossEncoderConfig.model: {config.model!r} has {model.num_labels} labels; a reranker needs 1"
            )
        return cls(model, config)

    def rerank(
        self, questions: Sequence[str], candidates: Sequence[Sequence[Candidate]]
    ) -> list[RerankOutput]:
        check_inputs(questions, candidates, "CrossEncoderReranker")
        pairs = [(q, passage(d)) for q, d in flat_pairs(questions, candidates)]
        if not pairs:
            return [RerankOutput([]) for _ in candidates]
        logits = self.model.predict(
            pairs,
            batch_size=self.config.batch_size,
            activation_fn=torch.nn.Identity(),
            show_progress_bar=False,
            convert_to_numpy=True,
        )  # [P]
        scores = np.asarray(logits, dtype=np.float64).reshape(len(pairs)).tolist()
        return [RerankOutput(s) for s in split_flat(scores, candidates)]
