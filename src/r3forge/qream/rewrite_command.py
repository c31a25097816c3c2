"""`r3forge rewrite`: QREAM as a post-retrieval step, and what it does to a reader's answers.

For each question, r_raw (the top-K of a retriever, or the record's own passages) is rewritten once:
- `method: icl`: QREAM-ICL, the rewriter with stylistic demonstrations (the seeds of an `annotate qream`
  run via `demos_from`, or new seeds drawn from `seed_qa_path` and written under `output_dir/seeds`);
- `method: ft`: a trained QREAM-FT student (`model` = its checkpoint), prompted as in its SFT data.
A rewrite that fails (too short, cut off) falls back to r_raw and says why. With `evaluate`, a fixed reader
then answers from r_raw and from the evidence after the step, and the report compares EM, F1 and tokens:

    evidence.jsonl   per question: r_raw, the rewrite (or the fallback reason), both answers, EM/F1, tokens
    report.json      means over questions for raw and rewritten evidence, and the token ratio

Stages run through the synthesis engine (`rewrite/`, `reader/`, `seeds/`): cached and resumable.
`rewrite_evidence` is the step on its own, for evaluation pipelines that rewrite after their reranker.
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from r3forge.backends.open import LLM, LLMConfig, open_llm
from r3forge.data.loaders import load_qa
from r3forge.errors import ConfigError
from r3forge.metrics.efficiency import input_tokens
from r3forge.metrics.qa import exact_match, f1_score
from r3forge.qream.pipeline import _mean, _stage, raw_retrievals, role
from r3forge.qream.rewrite import FTRewriteStep, RewriteStep, rewrite_item
from r3forge.qream.score import ReaderStep, candidate_key
from r3forge.qream.seeds import SeedDocStep, check_disjoint, load_demos, sample_seeds
from r3forge.synth.engine import EngineConfig, run_step
from r3forge.synth.export import load_accepted, rejected_keys
from r3forge.synth.job import RunConfig
from r3forge.synth.store import ShardSpec


@dataclass
class RewriteConfig:
    qa_path: str = field(metadata={"help": "Questions (with passages unless `index`/`retriever_url`)."})
    qa_format: str = field(default="auto", metadata={"help": "QA format for load_qa (auto: detect)."})
    max_questions: int | None = field(
        default=None, metadata={"help": "Use only the first N questions (unset: all)."}
    )
    top_k: int = field(
        default=5, metadata={"help": "K, passages concatenated into r_raw (paper: 5).", "min": 1}
    )
    index: str = field(
        default="", metadata={"help": "r_raw from this index's top-K; empty: each record's own passages."}
    )
    retriever_url: str = field(
        default="", metadata={"help": "r_raw from a running `r3forge serve retriever` instead of `index`."}
    )
    method: Literal["icl", "ft"] = field(
        default="icl",
        metadata={"help": "icl: the rewriter with stylistic demos; ft: a QREAM-FT checkpoint (`model`)."},
    )
    demos_from: str = field(
        default="",
        metadata={"help": "icl: an `annotate qream` output folder whose seeds/ are the demos; empty: new."},
    )
    seed_qa_path: str = field(
        default="", metadata={"help": "icl without demos_from: questions to draw stylistic seeds from."}
    )
    num_seeds: int = field(default=4, metadata={"help": "icl without demos_from: M seeds (paper: 4)."})
    seed: int = field(default=0, metadata={"help": "Seed of the seed-question draw."})
    seed_words: int = field(default=100, metadata={"help": "Target length of a seed document (words)."})
    max_tokens: int = field(default=384, metadata={"help": "Max new tokens of a rewrite."})
    temperature: float = field(default=0.0, metadata={"help": "Rewriter temperature (0: greedy)."})
    evaluate: bool = field(
        default=True, metadata={"help": "Reader answers from r_raw and from the rewrite; report EM/F1/TK."}
    )
    reader_few_shot: bool = field(
        default=False, metadata={"help": "Show the reader two short-answer demos first (small readers)."}
    )


@dataclass
class ReaderRoleConfig:
    reader_model: str = field(
        default="",
        metadata={
            "help": "Fixed reader; empty: the rewriter (`model`).",
            "model": ("reader_backend", "backend"),
        },
    )
    reader_backend: str = field(default="", metadata={"help": "Reader backend; empty: the rewriter's."})
    reader_base_url: str = field(default="", metadata={"help": "Reader API root; empty: the rewriter's."})


REWRITE_CONFIGS = (RewriteConfig, ReaderRoleConfig, LLMConfig, RunConfig)


def demonstrations(config: RewriteConfig, targets: list[dict], rewriter: LLM, run: RunConfig) -> list:
    """(seed question, seed document) pairs for QREAM-ICL, none of whose questions is a target."""
    if config.demos_from:
        return load_demos(config.demos_from, targets, "demos_from")
    drawn = sample_seeds(load_qa(config.seed_qa_path), targets, config.num_seeds, config.seed)
    check_disjoint(drawn, targets)
    run_step(SeedDocStep(config.seed_words), drawn, rewriter.backend, _stage(run, "seeds", rewriter))
    return load_demos(run.output_dir, targets, "seed_qa_path")


def _reasons(folder: Path) -> dict[str, str]:
    """question id -> reject reason of the rewrite stage's rejected records."""
    return {key["question_id"]: row["reason"] for key, row in rejected_keys(folder)}


def rewrite_evidence(
    step: Any, targets: list[dict], raw: dict[str, str], rewriter: LLM, engine: EngineConfig
) -> dict[str, dict]:
    """The post-retrieval step: question id -> {"raw", "rewrite" (None on failure), "evidence" (the rewrite,
    or r_raw as fallback), "fallback" (the reject reason, or "")}. `step`: a `RewriteStep` or
    `FTRewriteStep`; `raw`: question id -> r_raw."""
    items = [rewrite_item(r, raw[str(r["id"])], 1) for r in targets]
    run_step(step, items, rewriter.backend, engine)
    ids = {i["question_id"] for i in items}
    done = {
        r["question_id"]: r["rewrite"] for r in load_accepted(engine.output_dir) if r["question_id"] in ids
    }
    reasons = _reasons(Path(engine.output_dir))
    out = {}
    for item in items:
        q = item["question_id"]
        rewrite = done.get(q)
        out[q] = {
            "raw": item["source"],
            "rewrite": rewrite,
            "evidence": rewrite or item["source"],
            "fallback": "" if rewrite else reasons.get(q, "missing"),
        }
    return out


def read_both(
    config: RewriteConfig, targets: list[dict], evidence: dict[str, dict], reader: LLM, run: RunConfig
) -> dict[tuple, str]:
    """The reader's answer from r_raw (round 0) and from each rewrite (round 1): candidate key -> answer."""
    items = []
    for r in targets:
        e = evidence[str(r["id"])]
        base = {
            "question_id": str(r["id"]),
            "question": r["question"],
            "answers": list(r.get("answers") or []),
        }
        items.append(base | {"round": 0, "document": e["raw"]})
        if e["rewrite"]:
            items.append(base | {"round": 1, "document": e["rewrite"]})
    run_step(
        ReaderStep(few_shot=config.reader_few_shot), items, reader.backend, _stage(run, "reader", reader)
    )
    folder = Path(run.output_dir) / "reader"  # records carry the candidate key's fields
    return {(a["question_id"], a["round"], a["document_sha256"]): a["answer"] for a in load_accepted(folder)}


def evidence_rows(targets: list[dict], evidence: dict[str, dict], tokenizer: Any) -> list[dict]:
    """Per-question rows: r_raw, the rewrite (None on failure), the fallback reason, and the tokens (TK) of
    r_raw and of the evidence after the step (whitespace words without a tokenizer)."""
    rows = []
    for r in targets:
        q = str(r["id"])
        e = evidence[q]
        tk_raw, tk_new = input_tokens([e["raw"], e["evidence"]], tokenizer)
        rows.append(
            {
                "question_id": q,
                "question": r["question"],
                "answers": list(r.get("answers") or []),
                "raw": e["raw"],
                "rewrite": e["rewrite"],
                "fallback": e["fallback"],
                "tk_raw": tk_raw,
                "tk_rewrite": tk_new,
            }
        )
    return rows


def add_answers(rows: list[dict], answers: dict[tuple, str]) -> None:
    """Add each row's answers from r_raw and after the step (a fallback reuses the raw answer), EM and F1."""
    for row in rows:
        key = {k: row[k] for k in ("question_id", "question", "answers")}
        raw = answers.get(tuple(candidate_key(key | {"round": 0, "document": row["raw"]}).values()))
        new = raw
        if row["rewrite"]:
            new = answers.get(tuple(candidate_key(key | {"round": 1, "document": row["rewrite"]}).values()))
        for name, answer in (("raw", raw), ("rewrite", new)):
            scored = answer is not None and bool(row["answers"])
            row |= {
                f"answer_{name}": answer,
                f"em_{name}": exact_match(answer, row["answers"]) if scored else 0.0,
                f"f1_{name}": f1_score(answer, row["answers"]) if scored else 0.0,
            }


def rewrite_report(rows: list[dict], method: str, model_id: str) -> dict[str, Any]:
    """Rewrites, fallbacks by reason, mean TK (and EM/F1 when read) of r_raw and after the step."""
    fallbacks: dict[str, int] = {}
    for r in rows:
        if r["fallback"]:
            fallbacks[r["fallback"]] = fallbacks.get(r["fallback"], 0) + 1
    figures: dict[str, Any] = {
        "method": method,
        "rewriter": model_id,
        "questions": len(rows),
        "rewritten": sum(r["rewrite"] is not None for r in rows),
        "fallbacks": fallbacks,
    }
    metrics = ("em", "f1", "tk") if rows and "f1_raw" in rows[0] else ("tk",)
    for metric in metrics:
        for name in ("raw", "rewrite"):
            figures[f"{metric}_{name}"] = _mean([r[f"{metric}_{name}"] for r in rows])
    if figures.get("tk_raw"):
        figures["tk_ratio"] = round(figures["tk_rewrite"] / figures["tk_raw"], 4)
    return figures


def rewrite_main(
    config: RewriteConfig, reader_cfg: ReaderRoleConfig, rewriter_cfg: LLMConfig, run: RunConfig
) -> dict:
    """Rewrite each question's r_raw, optionally read both, write evidence.jsonl and report.json."""
    if config.method not in ("icl", "ft"):
        raise ConfigError(f"method must be icl or ft, got {config.method!r}")
    if config.method == "icl" and not (config.demos_from or config.seed_qa_path):
        raise ConfigError("method icl needs demos_from (a qream run) or seed_qa_path (to draw new seeds)")
    if run.dry_run:
        raise ConfigError("dry_run: not available for rewrite (the reader's requests need the rewrites)")
    shard = ShardSpec.parse(run.shard)
    targets = [
        r
        for r in list(load_qa(config.qa_path, config.qa_format))[: config.max_questions]
        if shard.owns({"question_id": str(r["id"])})
    ]
    out = Path(run.output_dir)
    with ExitStack() as stack:
        rewriter = stack.enter_context(open_llm(rewriter_cfg))
        if config.method == "icl":
            step = RewriteStep(
                demonstrations(config, targets, rewriter, run), config.temperature, config.max_tokens
            )
        else:
            step = FTRewriteStep(config.temperature, config.max_tokens)
        evidence = rewrite_evidence(
            step, targets, raw_retrievals(config, targets), rewriter, _stage(run, "rewrite", rewriter)
        )
        answers: dict[tuple, str] = {}
        if config.evaluate:
            reader_llm = role(rewriter_cfg, reader_cfg, "reader")
            reader = rewriter if reader_llm is rewriter_cfg else stack.enter_context(open_llm(reader_llm))
            answers = read_both(config, targets, evidence, reader, run)
    rows = evidence_rows(targets, evidence, rewriter.tokenizer)
    if config.evaluate:
        add_answers(rows, answers)
    figures = rewrite_report(rows, config.method, rewriter.model_id)
    out.mkdir(parents=True, exist_ok=True)
    (out / "evidence.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    (out / "report.json").write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(figures), file=sys.stdout)
    return figures
