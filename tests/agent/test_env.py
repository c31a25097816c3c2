"""The search environment on a real BM25 index: de-duplication, counters, observation formats."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from r3forge.agent.env import EnvConfig, SearchConfig, SearchEnv, open_env
from r3forge.errors import ConfigError
from r3forge.rerank import BiEncoderConfig, BiEncoderReranker
from r3forge.retrieval import load_retriever


def test_raw_observations_and_dedup(world):
    env = SearchEnv(load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=2))
    obs = env.observe(["birth year", "  birth   year ", "capital city"])
    assert obs[0].text == obs[1].text and obs[0].text.startswith("Doc 1(Title: ")
    assert len(obs[0].doc_ids) == 2 and obs[2].doc_ids != obs[0].doc_ids
    assert env.counters.as_dict() == {"queries": 3, "unique_queries": 2, "reranker_pairs": 0, "reranker_calls": 0,
                                      "reranker_pairs_requested": 0}  # fmt: skip
    assert env.seconds > 0.0  # wall time of retrieval (and reranking), for the GRPO step breakdown


def test_verbal_observations_from_a_served_reranker(world, vllm_server):
    """The verbal reranker is the embedded model behind a real vLLM server on loopback; a turn's equal
    queries are retrieved and judged once, in one batched call."""
    search = SearchConfig(index=str(world["index"]), reranker_base_url=vllm_server.base_url,
                          reranker_model="smollm2-135m-instruct", reranker_tokenizer="smollm2-135m-instruct",
                          reranker_max_tokens=24)  # fmt: skip
    with ExitStack() as stack:
        env = open_env(stack, search, EnvConfig(num_retrieve=3, num_shown=2, doc_max_words=30))
        obs = env.observe(["born in", " born  in", "founded", ""])
        assert env.counters.as_dict() == {"queries": 4, "unique_queries": 2, "reranker_pairs": 6, "reranker_calls": 1,
                                          "reranker_pairs_requested": 9}  # fmt: skip
        assert obs[0] == obs[1] and obs[0].text.startswith("[Doc 1] ") and "(Relevance score: " in obs[0].text
        assert len(obs[0].doc_ids) == 2 and obs[3].text == "No query was given."


def test_without_dedup_every_query_is_judged(world, minilm_path):
    reranker = BiEncoderReranker.from_config(BiEncoderConfig(encoder=str(minilm_path)))
    env = SearchEnv(
        load_retriever(world["index"]), reranker, EnvConfig(num_retrieve=4, num_shown=2, dedup=False)
    )
    obs = env.observe(["born in", "born in"])
    assert env.counters.reranker_pairs == env.counters.reranker_pairs_requested == 8
    assert env.counters.unique_queries == 2
    assert obs[0].text == obs[1].text and obs[0].scores == sorted(obs[0].scores, reverse=True)


def test_config_errors():
    with pytest.raises(ConfigError, match=r"num_shown \(3\) cannot exceed num_retrieve"):
        EnvConfig(num_retrieve=2, num_shown=3)
    with pytest.raises(ConfigError, match="exactly one of `index`"):
        SearchConfig()
    with pytest.raises(ConfigError, match="verbal needs a reranker"):
        SearchEnv(None, None, EnvConfig())


def test_open_env_from_an_index_folder(world):
    with ExitStack() as stack:
        env = open_env(stack, SearchConfig(index=str(world["index"])), EnvConfig(observation="raw"))
        assert env.observe(["capital"])[0].doc_ids
