"""The search environment of the agent: queries -> retriever -> (verbal) reranker -> observation text.

All rollouts of a batch advance together, so a turn's queries arrive as one list: they are de-duplicated
(exact string after whitespace normalization), retrieved in one `search` call and reranked in one batched
`rerank` call, and each rollout gets the observation of its query. Counters record how many queries came
in, how many were unique and how many (query, document) pairs the reranker judged: the calls dedup saves.

Observation formats (the body of `<information>`):
- verbal: the top-k documents by reranker score (ties by the score token's logprob), each as
  `[Doc i] comment (Relevance score: s)`; a document whose output did not parse shows its text instead;
- raw: the retriever's top-k as `Doc i(Title: t) text` (the Search-R1 baseline and the ablation).
Either body goes through `reward.neutralize_tags`: a document or comment that contains `</information>` or
`<answer>` cannot close the observation or answer for the policy; the rollout encodes it with the text of a
special token kept as text (`rollout.encode_text`), so "</infor<|im_end|>mation>" stays that text too.

    env = SearchEnv(load_retriever("indexes/world-bm25"), VerbalReranker(backend), EnvConfig(num_shown=3))
    env.observe(["birth year of Peibrette Thesick", "birth year of Peibrette Thesick"])  # 1 search, 1 rerank
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Literal

from r3forge.agent.reward import neutralize_tags
from r3forge.backends.open import LLMConfig, open_llm
from r3forge.errors import ConfigError
from r3forge.rerank.base import Reranker, RerankOutput, order, to_candidates
from r3forge.rerank.extractive import ExtractiveVerbalReranker
from r3forge.rerank.verbal import VerbalConfig, VerbalReranker
from r3forge.retrieval import open_retriever
from r3forge.retrieval.base import Retriever


@dataclass
class EnvConfig:
    observation: Literal["verbal", "raw"] = field(
        default="verbal",
        metadata={
            "help": "verbal: reranker comments + scores of the top-k; raw: the retriever's top-k texts."
        },
    )
    num_retrieve: int = field(default=15, metadata={"help": "n: documents retrieved per query (paper: 15)."})
    num_shown: int = field(default=3, metadata={"help": "k: documents shown per search (paper: 3)."})
    doc_max_words: int = field(
        default=0, metadata={"help": "Cut each document to this many words before reranking (0: whole)."}
    )
    dedup: bool = field(
        default=True,
        metadata={"help": "Retrieve and rerank equal queries of one turn once (False: once per rollout)."},
    )

    def __post_init__(self) -> None:
        if self.observation not in ("verbal", "raw"):
            raise ConfigError(f"observation must be 'verbal' or 'raw', got {self.observation!r}")
        if self.num_retrieve < 1 or self.num_shown < 1:
            raise ConfigError(
                f"need num_retrieve >= 1 and num_shown >= 1, got {self.num_retrieve}, {self.num_shown}"
            )
        if self.observation == "verbal" and self.num_shown > self.num_retrieve:
            raise ConfigError(
                f"num_shown ({self.num_shown}) cannot exceed num_retrieve ({self.num_retrieve})"
            )


@dataclass
class SearchConfig:
    index: str = field(default="", metadata={"help": "A saved index folder (`r3forge index build`)."})
    retriever_url: str = field(
        default="", metadata={"help": "Or a running `r3forge serve retriever` (any Search-R1 /retrieve)."}
    )
    reranker_backend: Literal["openai", "vllm", "hf", "extractive"] = field(
        default="openai",
        metadata={
            "help": "verbal observations: openai (a served model: vLLM, any OpenAI-compatible API), "
            "vllm (offline engine here), hf (transformers here), or extractive (no model: an "
            "answer-blind lexical stand-in that quotes each passage's best-matching sentence, "
            "rerank/extractive.py; reranker_model is then unused)."
        },
    )
    reranker_model: str = field(
        default="smollm2-135m-instruct",
        metadata={
            "help": "The verbal reranker: an exported student folder, a Hub id or (openai) the served name.",
            "model": ("reranker_backend",),
            "model_serve": "reranker_serve",
            "model_when": ("observation", ("verbal",)),
        },
    )
    reranker_base_url: str = field(
        default="http://127.0.0.1:8000/v1", metadata={"help": "openai reranker: the API root."}
    )
    reranker_serve: bool = field(
        default=False,
        metadata={
            "help": "Start `vllm serve` of reranker_model on a free loopback port for this run (openai)."
        },
    )
    reranker_tokenizer: str = field(
        default="",
        metadata={
            "help": "openai reranker: tokenizer to locate the score token (its logprob breaks score ties); "
            "empty: reranker_model's with reranker_serve, else none (ties by retriever order).",
            "model": (),
            "model_when": ("observation", ("verbal",)),
        },
    )
    reranker_max_tokens: int = field(default=128, metadata={"help": "Max new tokens of comment + score."})
    reranker_rank_by: str = field(
        default="score",
        metadata={
            "help": "Rank by the parsed score (ties: its logprob; the paper) or `expected` (sum s*p(s))."
        },
    )
    reranker_gpu_memory_utilization: float = field(
        default=0.0,
        metadata={
            "help": "reranker_serve / vllm on a GPU: its share of GPU memory (0: vLLM's default, 0.9; "
            "beside a colocated GRPO engine on the same GPU, e.g. 0.2)."
        },
    )

    def __post_init__(self) -> None:
        if bool(self.index) == bool(self.retriever_url):
            raise ConfigError("set exactly one of `index` (a saved index folder) or `retriever_url`")
        if self.reranker_backend == "extractive" and self.reranker_serve:
            raise ConfigError(
                "reranker_serve: the extractive reranker is no model, there is nothing to serve"
            )

    def reranker(self) -> LLMConfig:
        """The reranker as an `open_llm` config."""
        tokenizer = self.reranker_tokenizer or (self.reranker_model if self.reranker_serve else "")
        return LLMConfig(
            backend=self.reranker_backend,
            model=self.reranker_model,
            base_url=self.reranker_base_url,
            tokenizer=tokenizer,
            serve=self.reranker_serve,
            gpu_memory_utilization=self.reranker_gpu_memory_utilization,
        )


@dataclass
class Observation:
    """What one search returned to a rollout."""

    query: str
    text: str  # the body of <information>
    doc_ids: list[str]  # the shown documents, in shown order
    scores: list[float]  # their reranker scores (raw: retriever scores)
    tiebreak: list[float]  # score-token logprobs (raw: NaN)
    docs_text: str  # the shown documents' own texts, joined (what RA-R checks)
    retrieved: int = 0  # documents retrieved (and, verbal, judged) for the query


@dataclass
class EnvCounters:
    queries: int = 0  # queries received
    unique_queries: int = 0  # after de-duplication (= retriever queries)
    reranker_pairs: int = 0  # (query, document) pairs the reranker judged
    reranker_calls: int = 0  # batched rerank calls
    reranker_pairs_requested: int = 0  # pairs that judging every query on its own would have cost

    def as_dict(self) -> dict[str, int]:
        return {
            "queries": self.queries,
            "unique_queries": self.unique_queries,
            "reranker_pairs": self.reranker_pairs,
            "reranker_calls": self.reranker_calls,
            "reranker_pairs_requested": self.reranker_pairs_requested,
        }


def normalize_query(query: str) -> str:
    """The de-duplication key of a query: whitespace collapsed, case kept.

    >>> normalize_query("  who  wrote\\nHamlet ")
    'who wrote Hamlet'
    """
    return " ".join(query.split())


def format_verbal(
    out: RerankOutput, titles: Sequence[str], texts: Sequence[str], k: int
) -> tuple[list[int], str]:
    """The top-k candidate indices and the verbal observation body.

    >>> format_verbal(RerankOutput([2.0, 5.0], tiebreak=[0.0, -0.1], notes=["Off topic.", "States 1858."]),
    ...               ["A", "B"], ["a text", "b text"], 1)
    ([1], '[Doc 1] States 1858. (Relevance score: 5)')
    """
    picked = order(out)[:k]
    lines = []
    for rank, i in enumerate(picked, 1):
        note = (out.notes or [None] * len(texts))[i]
        body = note if note else f"(Title: {titles[i]}) {texts[i]}"
        score = out.scores[i]
        shown = int(score) if float(score).is_integer() else round(score, 3)
        lines.append(f"[Doc {rank}] {body} (Relevance score: {shown})")
    return picked, "\n".join(lines)


def format_raw(titles: Sequence[str], texts: Sequence[str]) -> str:
    """The Search-R1 observation body.

    >>> format_raw(["Paris"], ["The capital of France."])
    'Doc 1(Title: Paris) The capital of France.'
    """
    return "\n".join(
        f"Doc {i}(Title: {t}) {x}" for i, (t, x) in enumerate(zip(titles, texts, strict=True), 1)
    )


class SearchEnv:
    """Batched search for a turn's queries; `reranker` is None in raw mode."""

    def __init__(self, retriever: Retriever, reranker: Reranker | None, config: EnvConfig | None = None):
        self.retriever, self.reranker, self.config = retriever, reranker, config or EnvConfig()
        if self.config.observation == "verbal" and reranker is None:
            raise ConfigError("observation: verbal needs a reranker")
        self.counters = EnvCounters()
        self.seconds = 0.0  # wall time spent in retrieval and reranking

    def observe(self, queries: Sequence[str]) -> list[Observation]:
        """One observation per query (in order); equal queries share one retrieval and one reranking."""
        start = time.perf_counter()
        try:
            return self._observe(queries)
        finally:
            self.seconds += time.perf_counter() - start

    def _observe(self, queries: Sequence[str]) -> list[Observation]:
        c = self.config
        keys = [normalize_query(q) for q in queries]
        if not c.dedup:  # every query its own search: keys made distinct by position
            outs = self._observe_unique([k for k in keys if k])
            it = iter(outs)
            return [next(it) if k else _EMPTY for k in keys]
        unique = list(dict.fromkeys(k for k in keys if k))
        self.counters.queries += len(queries) - len(unique)
        by_key = dict(zip(unique, self._observe_unique(unique), strict=True))
        out = [by_key.get(k, _EMPTY) for k in keys]
        if c.observation == "verbal":
            self.counters.reranker_pairs_requested += sum(o.retrieved for o in out) - sum(
                o.retrieved for o in by_key.values()
            )
        return out

    def _observe_unique(self, unique: list[str]) -> list[Observation]:
        """Search and rerank each entry of `unique` (one batched call each)."""
        c = self.config
        self.counters.queries += len(unique)
        self.counters.unique_queries += len(unique)
        observations: list[Observation] = []
        if unique:
            n = c.num_retrieve if c.observation == "verbal" else c.num_shown
            hits = self.retriever.search(unique, n)
            docs = [self.retriever.get([pid for pid, _ in h]) for h in hits]
            if c.doc_max_words:
                docs = [
                    [d | {"text": " ".join(d["text"].split()[: c.doc_max_words])} for d in ds] for ds in docs
                ]
            if c.observation == "verbal":
                candidates = [to_candidates(ds) for ds in docs]
                outs = self.reranker.rerank(unique, candidates)
                self.counters.reranker_calls += 1
                self.counters.reranker_pairs += sum(len(x) for x in candidates)
                self.counters.reranker_pairs_requested += sum(len(x) for x in candidates)
            for j, key in enumerate(unique):
                titles = [str(d.get("title") or "") for d in docs[j]]
                texts = [str(d["text"]) for d in docs[j]]
                if c.observation == "verbal":
                    out = outs[j]
                    picked, body = format_verbal(out, titles, texts, c.num_shown)
                    scores = [out.scores[i] for i in picked]
                    tiebreak = [(out.tiebreak or [float("nan")] * len(texts))[i] for i in picked]
                else:
                    picked, body = list(range(len(texts))), format_raw(titles, texts)
                    scores, tiebreak = [s for _, s in hits[j]], [float("nan")] * len(texts)
                body = neutralize_tags(body) or "No documents were found."  # no document can close it
                shown = "\n".join(f"{titles[i]}\n{texts[i]}" for i in picked)
                ids = [str(docs[j][i]["id"]) for i in picked]
                observations.append(Observation(key, body, ids, scores, tiebreak, shown, len(docs[j])))
        return observations


_EMPTY = Observation("", "No query was given.", [], [], [], "")


def open_env(stack: ExitStack, search: SearchConfig, config: EnvConfig) -> SearchEnv:
    """The retriever (index folder or server) and, for verbal observations, the reranker (a vLLM server is
    started first with `reranker_serve`); everything closes with `stack`."""
    retriever = open_retriever(search.index, search.retriever_url)
    stack.callback(getattr(retriever, "close", lambda: None))
    reranker = None
    if config.observation == "verbal" and search.reranker_backend == "extractive":
        reranker = ExtractiveVerbalReranker()
    elif config.observation == "verbal":
        reranker_llm = stack.enter_context(open_llm(search.reranker()))
        verbal = VerbalConfig(max_tokens=search.reranker_max_tokens, rank_by=search.reranker_rank_by)
        reranker = VerbalReranker(reranker_llm.backend, reranker_llm.tokenizer, verbal)
    return SearchEnv(retriever, reranker, config)
