"""`r3forge eval rag`: sweep points, gating, set-aware prefixes, config errors, and one real run end to end on
the embedded model (probes, answers, rows, rerun from the saved scores and answers, the report)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from r3forge.backends.open import LLMConfig, open_llm
from r3forge.config import parse_config
from r3forge.errors import ConfigError
from r3forge.evalrag.config import EvalRagConfig, RerankModelsConfig
from r3forge.evalrag.pipeline import EVAL_CONFIGS, eval_main, prober_config, ranking_metrics, select_points
from r3forge.igp.probe import ProbeConfig, probe_gains, probe_request
from r3forge.synth.export import load_accepted, load_rejected

INF = math.inf


def cfg(**kw) -> EvalRagConfig:
    return EvalRagConfig(qa_path="unused.jsonl", **kw)


def test_select_points_igp_threshold_gating_and_budget():
    scored = {"ig": [0.2, -0.1, 0.3, 0.05], "nu_question": 0.5}
    tokens = [50, 50, 50, 50]
    points = select_points("igp", scored, tokens, cfg(top_m=[1, 3], thresholds=[-INF, 0.1], min_pass=1))
    got = {(p["top_m"], p["threshold"]): (p["indices"], p["mode"]) for p in points}
    assert got[(3, -INF)] == ([2, 0, 3], "igp")  # rerank only
    assert got[(3, 0.1)] == ([2, 0], "igp")  # T_p admits two of four
    assert got[(1, 0.1)] == ([2], "igp")
    # nothing reaches T_p = 0.5 with min_pass 1: the retriever's order, truncated the same way
    (p,) = select_points("igp", scored, tokens, cfg(top_m=[2], thresholds=[0.5], min_pass=1))
    assert (p["indices"], p["mode"], p["ranking"]) == ([0, 1], "fallback_pass_rate", [0, 1, 2, 3])
    # uncertainty gating: NU(q) below gate_nu -> IGP not applied
    (p,) = select_points("igp", scored, tokens, cfg(top_m=[2], thresholds=[0.0], gate_nu=0.9))
    assert p["mode"] == "skipped_certain" and p["indices"] == [0, 1]
    # token guard B: stop before the passage that would pass it
    (p,) = select_points("igp", scored, [50, 50, 80, 50], cfg(top_m=[3], thresholds=[-INF], token_budget=100))
    assert p["indices"] == [2]


def test_select_points_rerankers_ig_and_set_aware():
    scored = {"scores": [1.0, 3.0, 3.0, 2.0], "tiebreak": [0.0, -0.5, -0.1, 0.0]}
    (p,) = select_points("verbal", scored, [10] * 4, cfg(top_m=[2], thresholds=[0.0]))
    assert p["threshold"] is None  # not a thresholded method: one point per M
    assert p["indices"] == [2, 1] and p["ranking"] == [2, 1, 3, 0]  # score, then score-token logprob
    (p,) = select_points("ig", {"ig": [0.1, 0.1, 0.4], "nu_question": 0.3}, [10] * 3, cfg(top_m=[2]))
    assert p["indices"] == [2, 0]  # ties keep the retriever's order
    # set-aware: greedy picks with each round's gain; T_p cuts the prefix at the first gain below it
    greedy = {"picks": [2, 0, 1], "gains": [0.4, 0.05, -0.01], "ig": [0.1, 0.1, 0.4], "nu_question": 0.3}
    points = select_points("igp_set", greedy, [10] * 3, cfg(top_m=[3], thresholds=[-INF, 0.0, 0.1]))
    assert [p["indices"] for p in points] == [[2, 0, 1], [2, 0], [2]]


def test_ranking_metrics_without_labels_are_null():
    assert ranking_metrics(["a", "b"], {"a": 0, "b": 0})["ndcg@1"] is None  # no relevant candidate
    assert ranking_metrics(["b", "a"], {"a": 2, "b": 0})["recall@3"] == 1.0


def test_config_errors_name_the_key(tmp_path: Path):
    with pytest.raises(ConfigError, match="methods: unknown"):
        cfg(methods=["none", "bm42"])
    with pytest.raises(ConfigError, match="top_m"):
        cfg(top_m=[0])
    with pytest.raises(ConfigError, match="needs `index`"):
        cfg(candidates="index")
    bad = tmp_path / "bad.yaml"
    bad.write_text("qa_path: x.jsonl\nthreshold: 0.1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:2: unknown key 'threshold'"):
        parse_config((EvalRagConfig, RerankModelsConfig, LLMConfig), ["--config", str(bad)])


@pytest.fixture(scope="module")
def world_qa(tmp_path_factory) -> Path:
    """Three synthetic-world questions (10 passages each, graded relevance) as a saved canonical Dataset, the
    layout of the world's hf/questions folder."""
    from r3forge.data.synth_world import SynthWorldConfig, generate_world

    world = generate_world(SynthWorldConfig(seed=0, num_passages=200, num_questions=20, output_dir="unused"))
    path = tmp_path_factory.mktemp("world") / "questions"
    world.questions.select(range(3)).save_to_disk(str(path))
    return path


def run_args(qa: Path, out: Path, smollm2_path: Path, *extra: str) -> list[str]:
    """A YAML (T_p = -inf is `-.inf` there: argparse reads "-inf" on the command line as a flag) + flags."""
    config = out.parent / "eval.yaml"
    config.write_text("thresholds: [-.inf, 0.0]\nmethods: [none, ig, igp, igp_set]\ntop_m: [1, 2]\n")
    return ["--config", str(config), "--qa_path", str(qa), "--dataset", "world", "--num_candidates", "3",
            "--passage_max_words", "40", "--probe_k", "20", "--probe_max_steps", "4", "--answer_max_tokens", "8",
            "--model", str(smollm2_path), "--output_dir", str(out), "--progress", "false", *extra]  # fmt: skip


def test_eval_rag_end_to_end_and_rerun(world_qa: Path, smollm2_path: Path, tmp_path: Path):
    out = tmp_path / "run"
    args = run_args(world_qa, out, smollm2_path, "--max_questions", "2")
    result = eval_main(*parse_config((EvalRagConfig, RerankModelsConfig, LLMConfig), args))
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    # 2 questions x (none, ig: 2 M each; igp, igp_set: 2 M x 2 T_p)
    assert len(rows) == len(result["rows"]) == 2 * (2 + 2 + 4 + 4)
    by = {(r["question_id"], r["method"], r["top_m"], r["threshold"]): r for r in rows}
    for r in rows:
        assert 0.0 <= r["f1"] <= 1.0 and r["tk"] > 0 and len(r["selected"]) <= r["top_m"]
        relevant = any(c["relevance"] > 0 for c in _questions(out)[r["question_id"]]["candidates"])
        assert (r["ndcg@1"] is not None) == relevant  # graded relevance: NDCG wherever a gold passage is in
        if r["method"] == "igp" and r["threshold"] == -INF:  # T_p = -inf is pure IG reranking
            assert r["selected"] == by[(r["question_id"], "ig", r["top_m"], None)]["selected"]
        if r["method"] == "none":
            ids = [c["id"] for c in _questions(out)[r["question_id"]]["candidates"]]
            assert r["selected"] == ids[: r["top_m"]]
    # set-aware round 0 is plain IG: its first pick is IG's first
    for q in _questions(out):
        assert by[(q, "igp_set", 1, -INF)]["selected"] == by[(q, "ig", 1, None)]["selected"]
    stats = json.loads((out / "ig_stats.json").read_text())
    assert stats["igp"]["ig"]["0.0"]["count"] == 6 and 0.0 <= stats["igp"]["ig"]["0.0"]["pass_rate"] <= 1.0
    for name in (
        "table.md",
        "summary.json",
        "pareto_world.png",
        "f1_vs_tp_world.png",
        "ndcg_vs_f1_world.png",
    ):
        assert (out / name).is_file(), name

    # a rerun with one more question and a new T_p grid probes only the new question and reuses every answer
    assert len(_answer_keys(out)) == stats["answers"]  # one record per distinct (question, evidence)
    (probes,) = (out / "rerank").glob("ig-*.jsonl")
    before = probes.read_text().splitlines()
    assert len(before) == 2
    eval_main(*parse_config((EvalRagConfig, RerankModelsConfig, LLMConfig),
                            run_args(world_qa, out, smollm2_path, "--thresholds", "0.0", "0.05", "0.1")))  # fmt: skip
    after = probes.read_text().splitlines()
    assert after[:2] == before and len(after) == 3
    rows2 = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert len(rows2) == 3 * (2 + 2 + 6 + 6)
    stats2 = json.loads((out / "ig_stats.json").read_text())
    keys = _answer_keys(out)
    assert len(keys) == len(set(keys)) >= stats2["answers"]  # old answers reused, none generated twice


def test_eval_rag_qream_post_step(world_qa: Path, smollm2_path: Path, tmp_path: Path):
    """`rewrite: ft` (the embedded model standing in as the QREAM-FT rewriter): every row gets a `+qream` twin
    answered from one rewritten document (or, on a failed rewrite, from the same passages, saying why)."""
    out = tmp_path / "run"
    args = run_args(world_qa, out, smollm2_path, "--max_questions", "1", "--methods", "none", "--rewrite", "ft",
                    "--rewriter_model", str(smollm2_path), "--rewrite_max_tokens", "48")  # fmt: skip
    eval_main(*parse_config(EVAL_CONFIGS, args))
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert sorted((r["method"], r["top_m"]) for r in rows) == [
        ("none", 1), ("none", 2), ("none+qream", 1), ("none+qream", 2)]  # fmt: skip
    raw = {r["top_m"]: r for r in rows if r["method"] == "none"}
    (rewrite,) = (out / "rewrite").iterdir()  # one cache per rewriter identity
    rewrites = {r["source"]: r for r in load_accepted(rewrite)}
    assert len(rewrites) + len(load_rejected(rewrite)) == 2  # one rewrite per kept evidence set
    for twin in (r for r in rows if r["method"] == "none+qream"):
        assert twin["selected"] == raw[twin["top_m"]]["selected"]  # same selection, then the rewrite
        if twin["rewrite_fallback"] == "":
            assert twin["evidence_tokens"] != raw[twin["top_m"]]["evidence_tokens"]
        else:
            assert twin["evidence_tokens"] == raw[twin["top_m"]]["evidence_tokens"]
    assert "none+qream" in (out / "table.md").read_text()
    with pytest.raises(ConfigError, match="rewrite_demos_from"):
        parse_config(EVAL_CONFIGS, [*args, "--rewrite", "icl"])


def _answer_keys(out: Path) -> list[str]:
    (answers,) = (out / "answers").iterdir()  # one cache per generator identity
    parts = (load_accepted(answers), load_rejected(answers))
    return [key for ds in parts if len(ds) for key in ds["key"]]


def _questions(out: Path) -> dict[str, dict]:
    return {q["id"]: q for q in map(json.loads, (out / "questions.jsonl").read_text().splitlines())}


def test_paper_igp_config_probes_k128_over_http(vllm_server, smollm2_path: Path) -> None:
    """configs/eval/igp_qwen2.5-7b_vllm.yaml (backend: openai, probe_k: 128) against a server started with
    --max-logprobs 128: the generator config eval rag opens lets K = 128 through and every probe step carries
    128 alternatives (the client's default cap of 20 stopped the first probe)."""
    argv = ["--config", "configs/eval/igp_qwen2.5-7b_vllm.yaml", "--base_url", vllm_server.base_url,
            "--model", "smollm2-135m-instruct", "--tokenizer", str(smollm2_path)]  # fmt: skip
    config, _, generator_cfg, _ = parse_config(EVAL_CONFIGS, argv)
    assert (config.probe_k, generator_cfg.backend) == (128, "openai")
    probe = ProbeConfig(k=config.probe_k, max_steps=3)
    with open_llm(prober_config(config, generator_cfg)) as generator:
        (gain,) = probe_gains(
            generator.backend, ["Who wrote Hamlet?"], [["Hamlet is by Shakespeare."]], probe, {}
        )
        result = generator.backend.generate([probe_request("Who wrote Hamlet?", None, probe)])[0]
    assert all(len(step) == 128 for step in result.choices[0].top_logprobs)
    assert 0.0 <= gain.question.nu <= 1.0 and math.isfinite(gain.ig[0])


def test_two_checkpoints_named_final_get_their_own_probes_and_answers(
    world_qa: Path, two_checkpoints, tmp_path
):
    """`runs/a/final` then `runs/b/final` as the generator into one output folder: each gets its own IG probes
    and its own answers (both were once keyed `final`, and the second run silently reused the first's)."""
    out, runs = tmp_path / "run", []
    for final in two_checkpoints:
        args = run_args(
            world_qa, out, final, "--max_questions", "1", "--methods", "none", "ig", "--top_m", "1"
        )
        eval_main(*parse_config((EvalRagConfig, RerankModelsConfig, LLMConfig), args))
        runs.append(
            {(r["method"], r["question_id"]): r for r in map(json.loads, (out / "rows.jsonl").open())}
        )
    probes = sorted((out / "rerank").glob("ig-*.jsonl"))
    answers = sorted((out / "answers").iterdir())
    assert len(probes) == 2 and len(answers) == 2  # one probe file and one answer cache per checkpoint
    nu = [json.loads(p.read_text().splitlines()[0])["scored"]["nu_question"] for p in probes]
    assert nu[0] != nu[1]  # each file holds its own model's probes
    models = [
        {m for ds in (load_accepted(a), load_rejected(a)) if len(ds) for m in ds["model"]} for a in answers
    ]
    assert all(len(m) == 1 and next(iter(m)).startswith("final@") for m in models) and models[0] != models[1]
