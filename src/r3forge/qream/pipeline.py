"""`r3forge annotate qream`: seeds -> N rewriting rounds -> utility + fidelity scoring -> golden selection.

Every stage runs through the synthesis engine in its own folder under `output_dir` (cached, resumable after
`kill -9`, progress bar): `seeds/`, `round1/` .. `roundN/`, `reader/`, `facts/`, `fact_judge/` (`fact_judge_prob/`
with `fact_judge: prob`). Then:

    candidates.jsonl   every candidate: round, text, reader answer, hard filter, S_perf, S_fact, S_total,
                       whether it is the golden one (and, for dropped questions, why)
    golden.jsonl       one golden rewrite per kept question
    sft/               prompt/completion DatasetDict (instruction + question + r_raw -> golden rewrite),
                       train/validation split by question, plus <split>.jsonl
    report.json, README.md   pass rates per criterion, mean S_perf / S_fact, candidate-round statistics

`--shard i/N` takes the target questions whose id hashes to shard i (all stages of a question stay in one
shard folder, since round n needs round n-1's output).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import datasets
import torch

from r3forge.backends.hf_local import load_causal_lm
from r3forge.backends.open import LLM, LLMConfig, open_llm
from r3forge.config import where
from r3forge.data.loaders import load_qa
from r3forge.data.rows import split_by_question
from r3forge.errors import ConfigError
from r3forge.metrics.orientation import r_inc, s_orient
from r3forge.metrics.qa import answer_in_text
from r3forge.qream.extractive import extractive_candidates
from r3forge.qream.rewrite import RewriteStep, first_tokens, ft_prompt, raw_retrieval, rewrite_item
from r3forge.qream.score import (
    FactExtractStep,
    FactJudgeStep,
    ReaderStep,
    at_tau,
    candidate_key,
    judge_lexical,
)
from r3forge.qream.seeds import SeedDocStep, check_disjoint, sample_seeds
from r3forge.qream.select import RewriteCandidate, hard_filter, select_golden
from r3forge.retrieval import open_retriever
from r3forge.retrieval.base import IndexFormatError, read_manifest
from r3forge.synth.engine import EngineConfig, run_step
from r3forge.synth.export import load_accepted
from r3forge.synth.job import RunConfig
from r3forge.synth.store import ShardSpec


@dataclass
class QreamConfig:
    qa_path: str = field(
        metadata={"help": "Target questions with their retrieved passages (r3forge load_qa)."}
    )
    qa_format: str = field(default="auto", metadata={"help": "QA format for load_qa (auto: detect)."})
    max_questions: int | None = field(
        default=None, metadata={"help": "Use only the first N targets (unset: all)."}
    )
    seed_qa_path: str = field(
        default="",
        metadata={"help": "Questions to draw stylistic seeds from; empty: qa_path (minus targets)."},
    )
    num_seeds: int = field(default=4, metadata={"help": "M, the number of stylistic seeds (paper: 4)."})
    seed: int = field(default=0, metadata={"help": "Seed of the seed-question draw and of the split."})
    seed_words: int = field(default=100, metadata={"help": "Target length of a seed document (words)."})
    top_k: int = field(
        default=5, metadata={"help": "K, passages concatenated into r_raw (paper: 5).", "min": 1}
    )
    index: str = field(
        default="", metadata={"help": "r_raw from this index's top-K; empty: each record's own passages."}
    )
    retriever_url: str = field(
        default="", metadata={"help": "r_raw from a running `r3forge serve retriever` instead of `index`."}
    )
    rewriter: Literal["icl", "extractive"] = field(
        default="icl",
        metadata={
            "help": "icl (paper): the LLM rewrites with stylistic seeds; extractive: an offline teacher "
            "(not the paper) that keeps r_raw's question-bearing sentences, round n the best 2n."
        },
    )
    rounds: int = field(default=3, metadata={"help": "N, rewriting rounds = candidates per question."})
    prefix_tokens: int = field(
        default=100, metadata={"help": "l, tokens of round n-1 that round n rewrites."}
    )
    selection: Literal["dual", "utility", "fidelity", "none"] = field(
        default="dual",
        metadata={"help": "dual (paper), utility / fidelity only, none: the Table 4 ablations."},
    )
    echo_guard: bool = field(
        default=False,
        metadata={
            "help": "Hard filter: a gold the question names (A or B?) must be the exact answer (not paper)."
        },
    )
    reader_few_shot: bool = field(
        default=False, metadata={"help": "Show the reader two short-answer demos first (small readers)."}
    )
    max_facts: int = field(default=20, metadata={"help": "Atomic facts judged per candidate at most."})
    fact_judge: Literal["llm", "prob", "lexical"] = field(
        default="llm",
        metadata={
            "help": "llm (paper): the judge model's generated yes/no, one request per fact; prob: its "
            "P(yes) / (P(yes) + P(no)) at the answer token >= judge_tau (calibrate: annotate "
            "qream-judge-probe); lexical: content-token overlap with r_raw >= lexical_threshold, no model."
        },
    )
    judge_tau: float = field(
        default=0.5, metadata={"help": "fact_judge prob: P(yes) threshold (from annotate qream-judge-probe)."}
    )
    lexical_threshold: float = field(
        default=0.8, metadata={"help": "fact_judge lexical: share of a fact's content tokens found in r_raw."}
    )
    rewrite_max_tokens: int = field(default=384, metadata={"help": "Max new tokens of a rewrite."})
    temperature: float = field(default=0.0, metadata={"help": "Rewriter temperature (0: greedy)."})
    validation_fraction: float = field(default=0.1, metadata={"help": "Share of questions held out (SFT)."})
    orient_model: str = field(
        default="smollm2-135m-instruct",
        metadata={
            "help": "Fixed LM scoring s_orient of r_raw, candidates and golden rewrites; empty: skip.",
            "model": (),
        },
    )


@dataclass
class QreamModelsConfig:
    reader_model: str = field(
        default="",
        metadata={
            "help": "Fixed reader; empty: the rewriter (`model`).",
            "model": ("reader_backend", "backend"),
        },
    )
    reader_backend: str = field(default="", metadata={"help": "Reader backend; empty: the rewriter's."})
    reader_base_url: str = field(default="", metadata={"help": "Reader API root; empty: the rewriter's."})
    facts_model: str = field(
        default="",
        metadata={
            "help": "Atomic-fact extractor; empty: the rewriter.",
            "model": ("facts_backend", "backend"),
        },
    )
    facts_backend: str = field(default="", metadata={"help": "Extractor backend; empty: the rewriter's."})
    facts_base_url: str = field(default="", metadata={"help": "Extractor API root; empty: the rewriter's."})
    judge_model: str = field(
        default="",
        metadata={"help": "Fact-support judge; empty: the rewriter.", "model": ("judge_backend", "backend")},
    )
    judge_backend: str = field(default="", metadata={"help": "Judge backend; empty: the rewriter's."})
    judge_base_url: str = field(default="", metadata={"help": "Judge API root; empty: the rewriter's."})


QREAM_CONFIGS = (QreamConfig, QreamModelsConfig, LLMConfig, RunConfig)


def role(rewriter: LLMConfig, models: QreamModelsConfig, name: str) -> LLMConfig:
    """The model config of a role (reader / facts / judge): the rewriter's, with the role's overrides."""
    model, backend, url = (getattr(models, f"{name}_{k}") for k in ("model", "backend", "base_url"))
    if not (model or backend or url):
        return rewriter
    serve = rewriter.serve and not url and (backend or rewriter.backend) == "openai"
    return replace(
        rewriter,
        model=model or rewriter.model,
        backend=backend or rewriter.backend,
        base_url=url or rewriter.base_url,
        serve=serve,
    )


def _stage(run: RunConfig, name: str, llm: LLM) -> EngineConfig:
    return EngineConfig(
        output_dir=str(Path(run.output_dir) / name),
        model=llm.model_id,
        batch_size=run.batch_size,
        concurrency=run.concurrency,
        progress=run.progress,
    )


def _by_candidate(folder: Path) -> dict[tuple, dict]:
    return {(r["question_id"], r["round"], r["document_sha256"]): r for r in load_accepted(folder)}


def _ckey(item: dict) -> tuple:
    """The `_by_candidate` lookup key of a candidate item."""
    return tuple(candidate_key(item).values())


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def check_retrieval(config: Any) -> None:
    """Before anything is generated: the retrieval of r_raw a config (`index`, `retriever_url`) asks for is
    one of them, and `index` is a folder `r3forge index build` wrote (its index.json reads)."""
    if config.index and config.retriever_url:
        raise ConfigError(
            f"{where(config, 'index')} and {where(config, 'retriever_url')}: r_raw comes from one of them"
        )
    if config.index:
        try:
            read_manifest(config.index)
        except IndexFormatError as e:
            raise ConfigError(f"{where(config, 'index')}: {e}") from None


def raw_retrievals(config: QreamConfig, targets: list[dict]) -> dict[str, str]:
    """question id -> r_raw: the top-K of the configured retriever, or of the record's own passages (in the
    record's order: a retriever's ranking in FlashRAG-style retrieval results)."""
    if not (config.index or config.retriever_url):
        return {str(r["id"]): raw_retrieval(r["passages"], config.top_k) for r in targets}
    retriever = open_retriever(config.index, config.retriever_url)
    try:
        hits = retriever.search([r["question"] for r in targets], config.top_k)
        docs = {
            str(d["id"]): d for d in retriever.get(list(dict.fromkeys(p for row in hits for p, _ in row)))
        }
    finally:
        getattr(retriever, "close", lambda: None)()
    return {
        str(r["id"]): raw_retrieval([docs[str(p)] for p, _ in row], config.top_k)
        for r, row in zip(targets, hits, strict=True)
    }


def generate_candidates(
    config: QreamConfig, targets: list[dict], seeds: list[dict], rewriter: LLM, run: RunConfig
) -> list[dict]:
    """Seeds -> demos -> N rounds; returns every accepted rewrite as a candidate item (with r_raw). The
    extractive teacher needs neither seeds nor the rewriter model."""
    if config.rewriter == "extractive":
        return extractive_candidates(targets, raw_retrievals(config, targets), config.rounds)
    out = Path(run.output_dir)
    run_step(SeedDocStep(config.seed_words), seeds, rewriter.backend, _stage(run, "seeds", rewriter))
    demos = [(d["question"], d["document"]) for d in load_accepted(out / "seeds")]
    if not demos:
        raise ConfigError(f"{out / 'seeds'}: no seed document was accepted; see its rejected records")
    step = RewriteStep(demos, config.temperature, config.rewrite_max_tokens)
    raw = raw_retrievals(config, targets)
    by_id = {str(r["id"]): r for r in targets}
    items, candidates = [rewrite_item(r, raw[str(r["id"])], 1) for r in targets], []
    for n in range(1, config.rounds + 1):
        run_step(step, items, rewriter.backend, _stage(run, f"round{n}", rewriter))
        done = {r["question_id"]: r for r in load_accepted(out / f"round{n}") if r["question_id"] in by_id}
        candidates += [
            {**rewrite_item(by_id[q], raw[q], n), "raw": raw[q], "document": r["rewrite"]}
            for q, r in done.items()
        ]
        items = [
            rewrite_item(
                by_id[q], first_tokens(r["rewrite"], rewriter.tokenizer, config.prefix_tokens), n + 1
            )
            for q, r in done.items()
        ]
    for c in candidates:
        del c["source"]
    return candidates


def score_candidates(
    config: QreamConfig, candidates: list[dict], roles: dict[str, LLM], run: RunConfig
) -> list[dict]:
    """Utility (reader) and fidelity (facts, then one judge request per fact) of every candidate."""
    out = Path(run.output_dir)
    reader_step = ReaderStep(few_shot=config.reader_few_shot)
    run_step(reader_step, candidates, roles["reader"].backend, _stage(run, "reader", roles["reader"]))
    extract = FactExtractStep(config.max_facts)
    run_step(extract, candidates, roles["facts"].backend, _stage(run, "facts", roles["facts"]))
    reader, facts = _by_candidate(out / "reader"), _by_candidate(out / "facts")
    with_facts = [c | {"facts": facts[_ckey(c)]["facts"]} for c in candidates if _ckey(c) in facts]
    if config.fact_judge == "lexical":
        judged = {_ckey(c): judge_lexical(c, config.lexical_threshold) for c in with_facts}
    else:
        judge = roles["judge"]
        scoring, folder = (
            ("probability", "fact_judge_prob") if config.fact_judge == "prob" else ("verdict", "fact_judge")
        )
        step = FactJudgeStep(scoring=scoring, tau=config.judge_tau, tokenizer=judge.tokenizer)
        run_step(step, with_facts, judge.backend, _stage(run, folder, judge))
        judged = _by_candidate(out / folder)
        if config.fact_judge == "prob":
            judged = {k: at_tau(r, config.judge_tau) for k, r in judged.items()}
    rows = []
    for c in candidates:
        r, f, j = reader.get(_ckey(c)), facts.get(_ckey(c)), judged.get(_ckey(c))
        passes = bool(r) and hard_filter(
            r["answer"], c["answers"], c["question"] if config.echo_guard else ""
        )
        rows.append(
            {
                **c,
                "answer": r["answer"] if r else None,
                "passes": passes,
                "s_perf": r["s_perf"] if r else 0.0,
                "facts": f["facts"] if f else [],
                "supported": j["supported"] if j else [],
                "s_fact": j["s_fact"] if j else 0.0,
            }
        )
    return rows


def select_all(rows: list[dict], mode: str) -> tuple[list[dict], Counter]:
    """Mark the golden candidate of each question; count dropped questions by reason."""
    by_q: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_q.setdefault(r["question_id"], []).append(i)
    dropped: Counter = Counter()
    for idx in by_q.values():
        cands = [
            RewriteCandidate(
                i,
                rows[i]["round"],
                rows[i]["document"],
                rows[i]["passes"],
                rows[i]["s_perf"],
                rows[i]["s_fact"],
            )
            for i in idx
        ]
        golden, reason = select_golden(cands, mode)  # type: ignore[arg-type]
        for i in idx:
            rows[i] |= {
                "s_total": (rows[i]["s_perf"] + rows[i]["s_fact"]) / 2,
                "golden": golden is not None and golden.index == i,
                "dropped": reason,
            }
        if golden is None:
            dropped[reason] += 1
    return rows, dropped


def add_orientation(rows: list[dict], model_name: str, batch_size: int = 8) -> dict[str, float | None]:
    """s_orient (mean log P(q | d) per question token, under `model_name`) of every candidate (`rows`
    gain `s_orient`) and of each question's r_raw; mean r_inc (1 - S_fact over candidates with facts).
    Returns the means for raw, all candidates and golden rewrites."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = load_causal_lm(model_name, device=device)
    raw = {r["question_id"]: (r["raw"], r["question"]) for r in rows}
    raw_scores = s_orient(
        model, tokenizer, [d for d, _ in raw.values()], [q for _, q in raw.values()], batch_size=batch_size
    )
    scores = s_orient(
        model, tokenizer, [r["document"] for r in rows], [r["question"] for r in rows], batch_size=batch_size
    )
    for r, score in zip(rows, scores, strict=True):
        r["s_orient"] = score

    golden = [r for r in rows if r["golden"]]
    return {
        "s_orient_raw": _mean(raw_scores),
        "s_orient_candidates": _mean(scores),
        "s_orient_golden": _mean([r["s_orient"] for r in golden]),
        "r_inc_candidates": _mean([r_inc(r["supported"]) for r in rows if r["facts"]]),
        "r_inc_golden": _mean([r_inc(r["supported"]) for r in golden if r["facts"]]),
    }


def report(rows: list[dict], targets: int, dropped: Counter, mode: str) -> dict[str, Any]:
    golden = [r for r in rows if r["golden"]]
    rounds = sorted({r["round"] for r in rows})
    return {
        "selection": mode,
        "questions": targets,
        "questions_with_candidates": len({r["question_id"] for r in rows}),
        "golden": len(golden),
        "dropped": dict(dropped) | {"no_candidates": targets - len({r["question_id"] for r in rows})},
        "candidates": len(rows),
        "hard_filter_pass_rate": _mean([float(r["passes"]) for r in rows]),
        # comparison questions name their answer ("A or B?"): an echoing reader passes the filter there
        "passes_answer_in_question": sum(
            r["passes"] and answer_in_text(r["answers"], r["question"]) for r in rows
        ),
        "mean_s_perf": _mean([r["s_perf"] for r in rows]),
        "mean_s_fact": _mean([r["s_fact"] for r in rows]),
        "mean_s_total": _mean([r["s_total"] for r in rows]),
        "golden_mean_s_perf": _mean([r["s_perf"] for r in golden]),
        "golden_mean_s_fact": _mean([r["s_fact"] for r in golden]),
        "per_round": {
            str(n): {
                "candidates": sum(r["round"] == n for r in rows),
                "pass_rate": _mean([float(r["passes"]) for r in rows if r["round"] == n]),
                "mean_s_fact": _mean([r["s_fact"] for r in rows if r["round"] == n]),
                "golden": sum(r["golden"] and r["round"] == n for r in golden),
            }
            for n in rounds
        },
    }


def write_outputs(rows: list[dict], figures: dict[str, Any], config: QreamConfig, out: Path) -> None:
    def jsonl(path: Path, records: list[dict]) -> None:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")

    jsonl(out / "candidates.jsonl", rows)
    golden = [r for r in rows if r["golden"]]
    jsonl(out / "golden.jsonl", golden)
    sft = [
        {
            "prompt": [{"role": "user", "content": ft_prompt(r["question"], r["raw"])}],
            "completion": [{"role": "assistant", "content": r["document"]}],
            "question_id": r["question_id"],
            "question": r["question"],
            "answers": r["answers"],
            "round": r["round"],
            "s_total": r["s_total"],
        }
        for r in golden
    ]
    train, validation = split_by_question(sft, config.validation_fraction, config.seed)
    splits = {"train": train, "validation": validation}
    datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in splits.items() if v}).save_to_disk(
        str(out / "sft")
    )
    for name, split in splits.items():
        jsonl(out / "sft" / f"{name}.jsonl", split)
    (out / "report.json").write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    (out / "README.md").write_text(card(figures), encoding="utf-8")


def card(figures: dict[str, Any]) -> str:
    lines = [
        "---",
        "tags:",
        "- r3forge",
        "- qream",
        "- synthetic",
        "---",
        "",
        "# QREAM golden rewrites",
        "",
        f"Selection: `{figures['selection']}`.",
        "",
        "| | |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in figures.items() if not isinstance(v, dict)]
    lines += ["", "## Dropped questions", "", *[f"- `{k}`: {v}" for k, v in figures["dropped"].items()]]
    lines += [
        "",
        "## Candidates per round",
        "",
        "| round | candidates | pass rate | mean S_fact | golden |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {n} | {s['candidates']} | {s['pass_rate']} | {s['mean_s_fact']} | {s['golden']} |"
        for n, s in figures["per_round"].items()
    ]
    return "\n".join(lines) + "\n"


def qream_main(
    config: QreamConfig, models: QreamModelsConfig, rewriter_cfg: LLMConfig, run: RunConfig
) -> dict:
    """Run every stage (resuming what is done) and write the golden set, SFT data, report and card."""
    if config.rounds < 1:
        raise ConfigError(f"rounds must be >= 1, got {config.rounds}")
    if config.rewriter not in ("icl", "extractive"):
        raise ConfigError(f"rewriter must be icl or extractive, got {config.rewriter!r}")
    if config.fact_judge not in ("llm", "prob", "lexical"):
        raise ConfigError(f"fact_judge must be llm, prob or lexical, got {config.fact_judge!r}")
    if not 0 <= config.judge_tau <= 1:
        raise ConfigError(f"judge_tau must be in [0, 1], got {config.judge_tau}")
    if not 0 < config.lexical_threshold <= 1:
        raise ConfigError(f"lexical_threshold must be in (0, 1], got {config.lexical_threshold}")
    if run.dry_run:
        raise ConfigError(
            "dry_run: not available for qream (each stage's requests depend on the last's output)"
        )
    shard = ShardSpec.parse(run.shard)
    targets = [
        r
        for r in list(load_qa(config.qa_path, config.qa_format))[: config.max_questions]
        if shard.owns({"question_id": str(r["id"])})
    ]
    seeds = sample_seeds(
        load_qa(config.seed_qa_path or config.qa_path), targets, config.num_seeds, config.seed
    )
    check_disjoint(seeds, targets)
    with ExitStack() as stack:
        opened: dict[tuple, LLM] = {}

        def get(cfg: LLMConfig) -> LLM:
            ident = (cfg.backend, cfg.model, cfg.base_url, cfg.serve)
            if ident not in opened:
                opened[ident] = stack.enter_context(open_llm(cfg))
            return opened[ident]

        rewriter = get(rewriter_cfg)
        names = ("reader", "facts") + (("judge",) if config.fact_judge != "lexical" else ())
        roles = {name: get(role(rewriter_cfg, models, name)) for name in names}
        candidates = generate_candidates(config, targets, seeds, rewriter, run)
        rows = score_candidates(config, candidates, roles, run)
    rows, dropped = select_all(rows, config.selection)
    figures = report(rows, len(targets), dropped, config.selection)
    figures |= {"rewriter": config.rewriter, "echo_guard": config.echo_guard, "fact_judge": config.fact_judge}
    if config.orient_model and rows:
        figures |= add_orientation(rows, config.orient_model)
    write_outputs(rows, figures, config, Path(run.output_dir))
    print(json.dumps(figures), file=sys.stdout)
    return figures
