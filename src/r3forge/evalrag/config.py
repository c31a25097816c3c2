"""The configuration of `r3forge eval rag`: data and candidates, methods and budgets, the models of each role.

The generator (the `LLMConfig` fields: `backend`, `model`, `base_url`, `serve`, ...) answers with prompt A
and is also the model IGP probes and QLM scores with, as in the IGP paper (probing the generator itself). The
verbal reranker, YesNo scorer, cross-encoder and bi-encoder have their own fields; every local model runs on
the generator's `device`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from r3forge.errors import ConfigError

METHODS = (
    "none",
    "extractive",
    "biencoder",
    "cross_encoder",
    "qlm",
    "yesno",
    "verbal",
    "ig",
    "igp",
    "igp_set",
)
# methods whose selection depends on T_p; the others are swept over M only
THRESHOLDED = ("igp", "igp_set")


@dataclass
class EvalRagConfig:
    qa_path: str = field(metadata={"help": "Questions with answers (and passages for `candidates: own`)."})
    dataset: str = field(
        default="", metadata={"help": "Dataset label in rows and tables; empty: the file stem."}
    )
    qa_format: str = field(default="auto", metadata={"help": "QA format for load_qa (auto: detect)."})
    max_questions: int | None = field(
        default=None, metadata={"help": "Use only the first N questions (unset: all)."}
    )
    candidates: Literal["own", "index", "retriever_url"] = field(
        default="own",
        metadata={
            "help": "own: each record's passages in file order; index / retriever_url: a retriever's top-N."
        },
    )
    index: str = field(default="", metadata={"help": "candidates: index -> a saved index folder."})
    retriever_url: str = field(
        default="", metadata={"help": "candidates: retriever_url -> a running `r3forge serve retriever`."}
    )
    num_candidates: int = field(default=10, metadata={"help": "N: candidates per question before reranking."})
    methods: list[str] = field(
        default_factory=lambda: ["none", "ig", "igp"],
        metadata={
            "help": f"Rerank/admit methods to run, of {METHODS}; `none` (retriever order) is the baseline."
        },
    )
    top_m: list[int] = field(default_factory=lambda: [1, 3, 5], metadata={"help": "Top-M values to sweep."})
    thresholds: list[float] = field(
        default_factory=lambda: [0.0],
        metadata={"help": "T_p grid of igp / igp_set (IG >= T_p admitted; -inf: rerank only)."},
    )
    token_budget: int | None = field(
        default=None, metadata={"help": "B: token guard on the kept passages (generator tokens); null: none."}
    )
    min_pass: int = field(
        default=0, metadata={"help": "IGP pass-rate gating: fewer admitted -> retriever order."}
    )
    gate_nu: float | None = field(
        default=None, metadata={"help": "IGP uncertainty gating: apply IGP only when NU(q) >= gate_nu."}
    )
    probe_k: int = field(
        default=128, metadata={"help": "IGP K: top-K per probe step (hosted APIs cap at 20)."}
    )
    probe_max_steps: int = field(default=32, metadata={"help": "IGP MT: maximum probe rollout length."})
    inject_comments: bool = field(
        default=False,
        metadata={"help": "verbal: give the generator the reranker's comments instead of the raw documents."},
    )
    answer_max_tokens: int = field(default=32, metadata={"help": "Max new tokens of an answer."})
    answer_few_shot: bool = field(
        default=False, metadata={"help": "Show the generator two short-answer demos first (small models)."}
    )
    answer_cue: str = field(
        default="Answer:",
        metadata={
            "help": "Pre-fill the answer turn with this (needs a tokenizer: hf/vllm, or `tokenizer`); empty: none."
        },
    )
    passage_max_words: int | None = field(
        default=None, metadata={"help": "Cut every candidate passage to this many words (null: keep whole)."}
    )
    output_dir: str = field(
        default="runs/eval/rag", metadata={"help": "Run folder (resumable: results are cached)."}
    )
    batch_size: int = field(default=16, metadata={"help": "Requests per backend call (answers and probes)."})
    progress: bool = field(default=True, metadata={"help": "Progress bars on every loop (stderr)."})
    overwrite: bool = field(
        default=False,
        metadata={"help": "Move a folder of another run (or of this one) aside to <folder>.replaced-<time>."},
    )

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ConfigError(f"methods: unknown {unknown}; choose from {METHODS}")
        if not self.methods:
            raise ConfigError("methods: empty; list at least one (the baseline `none` makes NTE defined)")
        if not self.top_m or min(self.top_m) < 1:
            raise ConfigError(f"top_m: need a non-empty list of values >= 1, got {self.top_m}")
        if self.num_candidates < 1:
            raise ConfigError(f"num_candidates must be >= 1, got {self.num_candidates}")
        if any(isinstance(t, float) and math.isnan(t) for t in self.thresholds):
            raise ConfigError("thresholds: NaN is not a threshold (use -.inf for rerank-only)")
        self.thresholds = [float(t) for t in self.thresholds]
        if self.candidates == "index" and not self.index:
            raise ConfigError("candidates: index needs `index` (a folder built by `r3forge index build`)")
        if self.candidates == "retriever_url" and not self.retriever_url:
            raise ConfigError("candidates: retriever_url needs `retriever_url`")


@dataclass
class RerankModelsConfig:
    biencoder_model: str = field(
        default="all-minilm-l6-v2",
        metadata={"help": "biencoder: a sentence-transformers model (name or path).", "model": ()},
    )
    cross_encoder_model: str = field(
        default="",
        metadata={"help": "cross_encoder: a CrossEncoder checkpoint folder or Hub id.", "model": ()},
    )
    qlm_model: str = field(
        default="",
        metadata={
            "help": "qlm: transformers weights of the generator; empty: the generator's `model`.",
            "model": (),
        },
    )
    reranker_model: str = field(
        default="",
        metadata={
            "help": "verbal: the reranker LLM (e.g. an exported student); empty: the generator's `model`.",
            "model": ("reranker_backend", "backend"),
        },
    )
    yesno_model: str = field(
        default="",
        metadata={
            "help": "yesno: the LLM asked for P(Yes); empty: the generator's `model`.",
            "model": ("reranker_backend", "backend"),
        },
    )
    reranker_backend: str = field(
        default="", metadata={"help": "verbal / yesno: its backend; empty: the generator's."}
    )
    reranker_base_url: str = field(
        default="", metadata={"help": "verbal / yesno: its API root; empty: the generator's."}
    )
    reranker_max_tokens: int = field(
        default=128, metadata={"help": "verbal: max new tokens of comment + score."}
    )
    reranker_rank_by: str = field(
        default="score",
        metadata={"help": "verbal: rank by the parsed score (ties: its logprob; the paper) or `expected`."},
    )
