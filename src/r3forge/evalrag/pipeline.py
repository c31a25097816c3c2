"""`r3forge eval rag`: retrieve -> rerank/admit -> truncate -> generate -> score, swept over methods, Top-M
and T_p, with a per-question row for every point of the sweep.

    r3forge eval rag --config configs/eval/igp_hotpotqa_cpu.yaml

Run folder:
    questions.jsonl      the candidates of every question (id, title, tokens, gold relevance)
    rerank/*.jsonl       each method's scores, per question (reused by reruns with the same settings)
    rewrite/             with `rewrite: icl | ft`: the QREAM rewrites of kept passages (`<method>+qream` rows)
    answers/             the generator's answers (synthesis engine: cached by question + evidence, resumable)
    rows.jsonl           one row per (question, method, M, T_p): selection, answer, EM, F1, TK, NDCG/Recall@k
    ig_stats.json        IG distribution per T_p (pass rate, quantiles) and IGP gating modes
    summary.json, table.md, *.png   the report (`report.write_report`)
    tuned.json, tuned.md            IGP at a T_p tuned on half the questions vs `none` on the other half

Rankings do not depend on M or T_p, so each method scores each question once; selection then costs nothing
per sweep point, and an answer is generated once per distinct (question, evidence) pair.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from r3forge.backends.open import LLM, LLMConfig, open_llm
from r3forge.config import save_config
from r3forge.data.jsonio import finite, write_json, write_jsonl
from r3forge.data.loaders import load_qa
from r3forge.errors import ConfigError
from r3forge.evalrag.answer import AnswerStep, evidence_sha
from r3forge.evalrag.config import THRESHOLDED, EvalRagConfig, RerankModelsConfig
from r3forge.evalrag.plots import write_report
from r3forge.evalrag.qream_step import QreamStepConfig, add_twins, rewrite_all, rewrite_step, rewriter_config
from r3forge.evalrag.rankers import score_method
from r3forge.evalrag.tuning import write_tuned
from r3forge.identity import identity_folder
from r3forge.igp.select import SelectConfig, ig_stats, igp_select, rerank_by_ig, truncate
from r3forge.metrics.efficiency import input_tokens
from r3forge.metrics.ranking import ndcg_at_k, recall_at_k
from r3forge.rerank import Candidate, RerankOutput, order, passage
from r3forge.retrieval import open_retriever
from r3forge.retrieval.pairs import qa_items, retrieved_items
from r3forge.synth.engine import EngineConfig, run_step
from r3forge.synth.export import load_accepted, rejected_keys

K_VALUES = (1, 3, 5)
EVAL_CONFIGS = (EvalRagConfig, RerankModelsConfig, LLMConfig, QreamStepConfig)


def load_questions(config: EvalRagConfig) -> list[dict]:
    """Questions with their N candidates: {"id", "question", "answers", "candidates": [Candidate]}."""
    # QA files, or a saved canonical Dataset (the synthetic world's hf/questions)
    records = load_qa(config.qa_path, config.qa_format)
    limit = len(records) if config.max_questions is None else min(config.max_questions, len(records))
    records = records.select(range(limit))
    if config.candidates == "own":
        items = qa_items(records, max_docs=config.num_candidates)
    else:
        index, url = (config.index, "") if config.candidates == "index" else ("", config.retriever_url)
        retriever = open_retriever(index, url)
        items = list(retrieved_items(records, retriever, config.num_candidates))
        getattr(retriever, "close", lambda: None)()
    out: dict[str, dict] = {}
    for it in items:
        q = out.setdefault(
            it["question_id"],
            {"id": it["question_id"], "question": it["question"], "answers": it["answers"], "candidates": []},
        )
        relevance = -1 if it["relevance"] is None else int(it["relevance"])
        text = it["doc_text"]
        if config.passage_max_words:
            text = " ".join(text.split()[: config.passage_max_words])
        q["candidates"].append(Candidate(it["doc_id"], it["doc_title"], text, relevance))
    empty = [r["id"] for r in records if str(r["id"]) not in out]
    if empty:
        print(f"eval rag: {len(empty)} question(s) without candidates skipped: {empty[:5]}", file=sys.stderr)
    return list(out.values())


def graded(candidates: list[Candidate]) -> dict[str, int] | None:
    """qrels of a question, or None when no candidate carries a gold label."""
    if all(c.relevance < 0 for c in candidates):
        return None
    return {c.id: max(c.relevance, 0) for c in candidates}


def ranking_metrics(ranking: list[str], qrels: dict[str, int] | None) -> dict[str, float | None]:
    """NDCG@k and Recall@k of a full candidate ranking (None without gold labels).

    >>> ranking_metrics(["b", "a"], {"a": 1, "b": 0})["ndcg@1"], ranking_metrics(["a"], None)["recall@1"]
    (0.0, None)
    """
    out: dict[str, float | None] = {}
    for k in K_VALUES:
        ok = qrels is not None and any(qrels.values())
        out[f"ndcg@{k}"] = round(ndcg_at_k(ranking, qrels, k), 4) if ok else None
        out[f"recall@{k}"] = round(recall_at_k(ranking, qrels, k), 4) if ok else None
    return out


def select_config(m: int, t: float, config: EvalRagConfig) -> SelectConfig:
    return SelectConfig(
        threshold=t,
        top_m=m,
        token_budget=config.token_budget,
        min_pass=config.min_pass,
        gate_nu=config.gate_nu,
    )


def select_points(method: str, scored: dict, tokens: list[int], config: EvalRagConfig) -> list[dict]:
    """Every sweep point of one question and method: {"top_m", "threshold", "indices", "ranking", "mode"}.
    `scored`: the method's saved scores of the question (see `rankers.score_method`)."""
    points = []
    retriever = list(range(len(tokens)))
    thresholds = config.thresholds if method in THRESHOLDED else [None]
    for m in config.top_m:
        for t in thresholds:
            mode = None
            if method == "igp":
                sel = igp_select(scored["ig"], scored["nu_question"], tokens, select_config(m, t, config))
                kept, mode, ranking = sel.indices, sel.mode, rerank_by_ig(scored["ig"])
            elif method == "igp_set":
                kept, mode, ranking = set_selection(scored, tokens, select_config(m, t, config))
            else:
                ranking = rerank_by_ig(scored["ig"]) if method == "ig" else order_of(scored)
                kept = truncate(ranking, tokens, m, config.token_budget)
            if mode in ("skipped_certain", "fallback_pass_rate"):
                ranking = retriever
            points.append({"top_m": m, "threshold": t, "indices": kept, "ranking": ranking, "mode": mode})
    return points


def order_of(scored: dict) -> list[int]:
    return order(RerankOutput(scores=scored["scores"], tiebreak=scored.get("tiebreak")))


def set_selection(scored: dict, tokens: list[int], select: SelectConfig) -> tuple[list[int], str, list[int]]:
    """Set-aware greedy picks (computed once with T_p = -inf and the largest M): the prefix whose every
    round gain is >= T_p, at most M, then B. The gates are plain IGP's, on round 0's IG (`igp_select`).
    Returns (kept, mode, ranking)."""
    gated = igp_select(scored["ig"], scored["nu_question"], tokens, select)
    if gated.mode != "igp":
        return gated.indices, gated.mode, list(range(len(tokens)))
    picks = scored["picks"]
    prefix = []
    for i, g in zip(picks, scored["gains"], strict=True):
        if g < select.threshold:
            break
        prefix.append(i)
    rest = [i for i in rerank_by_ig(scored["ig"]) if i not in picks]
    return truncate(prefix, tokens, select.top_m, select.token_budget), "igp", picks + rest


def evidence(
    method: str, scored: dict, candidates: list[Candidate], kept: list[int], inject: bool
) -> list[str]:
    """The documents prompt A shows: raw passages, or (verbal + inject_comments) the reranker's comments."""
    notes = scored.get("notes") if method == "verbal" and inject else None
    return [notes[i] if notes and notes[i] else passage(candidates[i]) for i in kept]


def answer_all(items: list[dict], generator: LLM, config: EvalRagConfig) -> dict[tuple, dict]:
    """(question id, evidence sha) -> {"answer", "em", "f1", "tk"}; empty answers count as wrong."""
    step = AnswerStep(
        config.answer_max_tokens, config.answer_few_shot, config.answer_cue, generator.tokenizer
    )
    folder = (
        Path(config.output_dir) / "answers" / identity_folder(generator.model_id)
    )  # one cache per generator
    engine = EngineConfig(
        output_dir=str(folder),
        model=generator.model_id,
        batch_size=config.batch_size,
        progress=config.progress,
    )
    run_step(step, items, generator.backend, engine)
    out = {}
    for key, r in rejected_keys(engine.output_dir):
        out[(key["question_id"], key["evidence_sha256"])] = {
            "answer": "",
            "em": 0.0,
            "f1": 0.0,
            "tk": r["prompt_tokens"],
        }
    for r in load_accepted(engine.output_dir):
        out[(r["question_id"], r["evidence_sha256"])] = {
            "answer": r["answer"],
            "em": r["em"],
            "f1": r["f1"],
            "tk": r["prompt_tokens"],
        }
    return out


def sweep_rows(
    questions: list[dict], scores: dict[str, dict], tokens: dict[str, list[int]], config: EvalRagConfig
) -> tuple[list[dict], list[dict]]:
    """(rows without answers, answer items): one row per question x method x sweep point."""
    rows, items, dataset = [], {}, config.dataset or Path(config.qa_path).stem
    for q in questions:
        qrels, ids = graded(q["candidates"]), [c.id for c in q["candidates"]]
        for method in config.methods:
            scored = scores[method][q["id"]]
            for p in select_points(method, scored, tokens[q["id"]], config):
                docs = evidence(method, scored, q["candidates"], p["indices"], config.inject_comments)
                item = {
                    "question_id": q["id"],
                    "question": q["question"],
                    "answers": q["answers"],
                    "documents": docs,
                }
                key = (q["id"], evidence_sha(docs))
                items[key] = item
                rows.append(
                    {
                        "dataset": dataset,
                        "question_id": q["id"],
                        "method": method,
                        "top_m": p["top_m"],
                        "threshold": p["threshold"],
                        "token_budget": config.token_budget,
                        "selected": [ids[i] for i in p["indices"]],
                        "evidence_tokens": sum(tokens[q["id"]][i] for i in p["indices"]),
                        "_key": key,
                        **ranking_metrics([ids[i] for i in p["ranking"]], qrels),
                        "nu_question": scored.get("nu_question"),
                        "mode": p["mode"],
                    }
                )
    return rows, list(items.values())


def run_ig_stats(
    questions: list[dict], scores: dict[str, dict], rows: list[dict], config: EvalRagConfig
) -> dict:
    """IG distribution at each T_p and the gating modes of each thresholded method."""
    out: dict[str, Any] = {}
    for method in [m for m in config.methods if m in ("ig", *THRESHOLDED)]:
        values = [g for q in questions for g in scores[method][q["id"]]["ig"]]
        modes = Counter((r["top_m"], r["threshold"], r["mode"]) for r in rows if r["method"] == method)
        out[method] = {
            "ig": {str(t): ig_stats(values, t) for t in config.thresholds},
            "nu_question_mean": round(
                sum(scores[method][q["id"]]["nu_question"] for q in questions) / max(len(questions), 1), 4
            ),
            "modes": [
                {"top_m": m, "threshold": t, "mode": mode, "count": n} for (m, t, mode), n in modes.items()
            ],
        }
    return out


def qream_twins(
    rows: list[dict],
    items: list[dict],
    questions: list[dict],
    roles: tuple[LLMConfig, LLM],
    config: EvalRagConfig,
    qream: QreamStepConfig,
    stack: ExitStack,
) -> tuple[list[dict], list[dict]]:
    """The QREAM post-step: rewrite every kept evidence set, add the `<method>+qream` rows and their items."""
    generator_cfg, generator = roles
    rewriter_cfg = rewriter_config(qream, generator_cfg)
    rewriter = generator if rewriter_cfg is generator_cfg else stack.enter_context(open_llm(rewriter_cfg))
    step = rewrite_step(qream, questions)
    folder = (
        Path(config.output_dir) / "rewrite" / identity_folder(rewriter.model_id)
    )  # one cache per rewriter
    engine = EngineConfig(
        output_dir=str(folder),
        model=rewriter.model_id,
        batch_size=config.batch_size,
        progress=config.progress,
    )
    rewritten = rewrite_all(items, step, rewriter, engine)
    return add_twins(rows, items, rewritten, generator.tokenizer)


def prober_config(config: EvalRagConfig, generator_cfg: LLMConfig) -> LLMConfig:
    """The generator's config with `max_logprobs` raised to IGP's K when a probing method runs: a started
    vLLM (engine or server) must serve top-K, and an `openai` client lets requests up to it through (the
    server must be started with `--max-logprobs` >= K)."""
    if {"ig", "igp", "igp_set"} & set(config.methods) and generator_cfg.max_logprobs < config.probe_k:
        return replace(generator_cfg, max_logprobs=config.probe_k)
    return generator_cfg


def eval_main(
    config: EvalRagConfig,
    models: RerankModelsConfig,
    generator_cfg: LLMConfig,
    qream: QreamStepConfig | None = None,
) -> dict[str, Any]:
    """Run the sweep; write the run folder; return {"rows", "timings", "report"}."""
    qream = qream or QreamStepConfig()
    generator_cfg = prober_config(config, generator_cfg)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_config((config, models, generator_cfg, qream), out / "config.yaml")
    questions = load_questions(config)
    if not questions:
        raise ConfigError(f"qa_path: {config.qa_path}: no question with candidates")
    timings: dict[str, float] = {}
    with ExitStack() as stack:
        generator = stack.enter_context(open_llm(generator_cfg))
        if hasattr(generator.backend, "batch_size"):
            generator.backend.batch_size = config.batch_size
        tokenizer = generator.tokenizer
        tokens = {q["id"]: input_tokens([passage(c) for c in q["candidates"]], tokenizer) for q in questions}
        write_jsonl(
            out / "questions.jsonl",
            [
                {
                    "id": q["id"],
                    "question": q["question"],
                    "answers": q["answers"],
                    "candidates": [
                        {"id": c.id, "title": c.title, "relevance": c.relevance, "tokens": n}
                        for c, n in zip(q["candidates"], tokens[q["id"]], strict=True)
                    ],
                }
                for q in questions
            ],
        )
        scores, nu_cache = {}, {}  # NU(q) of every question, shared by the probing methods
        for method in config.methods:
            start = time.perf_counter()
            roles = (generator_cfg, generator)
            scores[method] = score_method(method, questions, config, models, roles, stack, nu_cache)
            timings[f"score_{method}_s"] = round(time.perf_counter() - start, 2)
        rows, items = sweep_rows(questions, scores, tokens, config)
        if qream.rewrite != "none":
            start = time.perf_counter()
            roles = (generator_cfg, generator)
            rows, items = qream_twins(rows, items, questions, roles, config, qream, stack)
            timings["rewrite_s"] = round(time.perf_counter() - start, 2)
        start = time.perf_counter()
        answers = answer_all(items, generator, config)
        timings["answer_s"] = round(time.perf_counter() - start, 2)
    for row in rows:
        row.update(answers[row.pop("_key")])
    write_jsonl(out / "rows.jsonl", rows)
    stats = run_ig_stats(questions, scores, rows, config) | {"timings": timings, "answers": len(items)}
    write_json(out / "ig_stats.json", stats)
    clean = [finite(r) for r in rows]
    report = write_report(clean, out)
    write_tuned(clean, out)
    print(
        f"eval rag: {len(questions)} questions, {len(rows)} rows, {len(items)} answers -> {out}",
        file=sys.stderr,
    )
    return {"rows": rows, "timings": timings, "report": report}
