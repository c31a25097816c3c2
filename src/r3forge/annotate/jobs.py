"""The annotation jobs behind `r3forge annotate verbal|judge|paraphrase`: configs and `main`s.

    r3forge annotate verbal --config configs/annotate/verbal_hotpotqa_cpu.yaml
    r3forge annotate judge --annotation_dir runs/annotate/verbal --output_dir runs/annotate/judge \\
        --backend openai --model Qwen/Qwen2.5-7B-Instruct --base_url http://judge-node:8000/v1
    r3forge annotate paraphrase --config configs/annotate/paraphrase_hotpotqa_cpu.yaml

Each job's flags (and YAML keys, in one flat file) come from several config classes: which pairs
(`PairsConfig`), the step's own settings, the teacher (`LLMConfig`), the run (`RunConfig`: output folder,
batching, `--shard i/N`, `--dry_run`) and the Hub upload (`HubConfig`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from r3forge.annotate.judge import AnnotationJudgeStep, judge_items
from r3forge.annotate.paraphrase import ParaphraseChecks, ParaphraseStep
from r3forge.annotate.report import annotation_report, format_report, judge_report, write_report
from r3forge.annotate.verbal import Checks, VerbalAnnotationStep
from r3forge.backends.open import LLMConfig, llm_identity, load_tokenizer, open_llm
from r3forge.data.loaders import load_qa
from r3forge.errors import ConfigError
from r3forge.retrieval import open_retriever
from r3forge.retrieval.pairs import qa_items, retrieved_items
from r3forge.synth.engine import RunSummary, run_step
from r3forge.synth.export import HubConfig, push_from_config
from r3forge.synth.job import RunConfig, engine_config
from r3forge.synth.store import ShardSpec


@dataclass
class PairsConfig:
    qa_path: str = field(metadata={"help": "QA data (file, glob, folder or hf://...): r3forge load_qa."})
    qa_format: str = field(default="auto", metadata={"help": "QA format for load_qa (auto: detect)."})
    pairing: Literal["own", "retrieval"] = field(
        default="own",
        metadata={"help": "own: each question's own passages; retrieval: a retriever's top_n per question."},
    )
    index: str = field(
        default="", metadata={"help": "retrieval: a saved index folder (r3forge index build)."}
    )
    retriever_url: str = field(
        default="", metadata={"help": "retrieval: a running `r3forge serve retriever` instead of `index`."}
    )
    top_n: int = field(default=10, metadata={"help": "retrieval: documents per question (the paper: 50)."})
    max_questions: int | None = field(
        default=None, metadata={"help": "Use only the first N questions (unset: all)."}
    )
    max_docs_per_question: int | None = field(
        default=None, metadata={"help": "own: use only each question's first N passages."}
    )


@dataclass
class VerbalAnnotateConfig:
    template_path: str | None = field(
        default=None, metadata={"help": "Own prompt template ({question} {title} {document}); default v1."}
    )
    max_comment_words: int = field(default=120, metadata={"help": "Reject longer comments (overlong)."})
    copy_max_run: int = field(
        default=20, metadata={"help": "Reject comments sharing a longer word run with the document."}
    )
    copy_max_fraction: float = field(
        default=0.8, metadata={"help": "Reject comments whose copied run exceeds this share of their words."}
    )
    temperature: float = field(default=0.0, metadata={"help": "Teacher sampling temperature (0: greedy)."})
    max_tokens: int = field(default=256, metadata={"help": "Max new tokens (hitting it: truncated)."})
    top_logprobs: int = field(default=5, metadata={"help": "Top-k logprobs per token (score-token dist)."})
    prefill: str = field(
        default="", metadata={"help": "Start of the teacher's answer, e.g. 'Comment:' (needs a tokenizer)."}
    )
    few_shot: bool = field(
        default=False, metadata={"help": "Show the two built-in demos first (small teachers)."}
    )


@dataclass
class JudgeConfig:
    annotation_dir: str = field(metadata={"help": "Output folder of the verbal annotation run to judge."})
    template_path: str | None = field(
        default=None, metadata={"help": "Own judge template ({question} {document} {comment} {score})."}
    )
    temperature: float = field(default=0.0, metadata={"help": "Judge sampling temperature (0: greedy)."})
    max_tokens: int = field(default=96, metadata={"help": "Max new tokens (hitting it: truncated)."})
    top_logprobs: int = field(default=5, metadata={"help": "Top-k logprobs (P(yes) at the verdict)."})
    prefill: str = field(
        default="", metadata={"help": "Start of the judge's answer, e.g. 'Verdict:' (needs a tokenizer)."}
    )
    few_shot: bool = field(default=False, metadata={"help": "Show two built-in demos first (small judges)."})
    max_items: int | None = field(default=None, metadata={"help": "Judge only the first N annotations."})


@dataclass
class ParaphraseConfig:
    template_path: str | None = field(
        default=None, metadata={"help": "Own template ({document}, optional {title}); default v1."}
    )
    min_ratio: float = field(default=0.3, metadata={"help": "Reject rewrites under this x document words."})
    max_ratio: float = field(default=2.0, metadata={"help": "Reject rewrites over this x document words."})
    max_copied: float = field(
        default=0.9, metadata={"help": "Reject a verbatim run over this share of the document (unchanged)."}
    )
    temperature: float = field(default=0.0, metadata={"help": "Teacher sampling temperature (0: greedy)."})
    max_tokens: int = field(default=512, metadata={"help": "Max new tokens (hitting it: truncated)."})

    def __post_init__(self) -> None:
        if self.min_ratio > self.max_ratio:
            raise ConfigError(
                f"min_ratio ({self.min_ratio:g}) is over max_ratio ({self.max_ratio:g}): every rewrite would be "
                "rejected as too short or too long"
            )


VERBAL_CONFIGS = (PairsConfig, VerbalAnnotateConfig, LLMConfig, RunConfig, HubConfig)
JUDGE_CONFIGS = (JudgeConfig, LLMConfig, RunConfig, HubConfig)
PARAPHRASE_CONFIGS = (PairsConfig, ParaphraseConfig, LLMConfig, RunConfig, HubConfig)


def load_pairs(config: PairsConfig) -> list[dict]:
    """The (question, document) items of a job, in input order."""
    records = load_qa(config.qa_path, config.qa_format)
    if config.pairing == "own":
        return list(qa_items(records, config.max_questions, config.max_docs_per_question))
    retriever = open_retriever(config.index, config.retriever_url)
    try:
        return list(retrieved_items(records, retriever, config.top_n, config.max_questions))
    finally:
        getattr(retriever, "close", lambda: None)()


def run_job(
    make_step: Any,
    items: Sequence[dict],
    teacher: LLMConfig,
    run: RunConfig,
    hub: HubConfig,
    after: Callable[[], None] | None = None,
) -> RunSummary:
    """Open the teacher (not for a dry run), build the step with its tokenizer, run it, then `after()`
    (reports written into the folder) and push the folder when `push_to_hub` is set (unsharded runs).

    `make_step(tokenizer)` builds the step (the tokenizer locates score / verdict tokens; may be None).
    """
    engine = engine_config(run, teacher, llm_identity(teacher))
    if run.dry_run:
        tokenizer = load_tokenizer(engine.tokenizer) if engine.tokenizer else None
        return run_step(make_step(tokenizer), items, None, engine)
    with open_llm(teacher) as opened:
        summary = run_step(make_step(opened.tokenizer), items, opened.backend, engine)
    if ShardSpec.parse(run.shard).count == 1:
        if after is not None:
            after()
        push_from_config(run.output_dir, hub)
    print(json.dumps(asdict(summary)), file=sys.stdout)
    return summary


def verbal_main(
    pairs: PairsConfig, config: VerbalAnnotateConfig, teacher: LLMConfig, run: RunConfig, hub: HubConfig
) -> RunSummary:
    """`r3forge annotate verbal`: pairs -> teacher comment + score; then the agreement report."""
    items = load_pairs(pairs)
    checks = Checks(config.max_comment_words, config.copy_max_run, config.copy_max_fraction)

    def make_step(tokenizer: Any) -> VerbalAnnotationStep:
        return VerbalAnnotationStep(
            config.template_path,
            checks,
            config.temperature,
            config.max_tokens,
            config.top_logprobs,
            config.prefill,
            config.few_shot,
            tokenizer,
        )

    def report() -> None:
        labels = {(i["question_id"], i["doc_id"]): i["relevance"] for i in items}
        figures = annotation_report(run.output_dir, labels)
        write_report(figures, run.output_dir)
        print(format_report(figures), file=sys.stderr)

    return run_job(make_step, items, teacher, run, hub, report)


def judge_main(config: JudgeConfig, teacher: LLMConfig, run: RunConfig, hub: HubConfig) -> RunSummary:
    """`r3forge annotate judge`: a second model approves or not each accepted annotation."""
    items = list(judge_items(config.annotation_dir, config.max_items))

    def make_step(tokenizer: Any) -> AnnotationJudgeStep:
        return AnnotationJudgeStep(
            config.template_path,
            config.temperature,
            config.max_tokens,
            config.top_logprobs,
            config.prefill,
            config.few_shot,
            tokenizer,
        )

    def report() -> None:
        figures = judge_report(run.output_dir, [{"annotation_key": i["annotation_key"]} for i in items])
        write_report(figures, run.output_dir)
        approved, judged = figures["annotations_approved"], figures["annotations_judged"]
        print(f"judge: {approved}/{judged} judged annotations approved", file=sys.stderr)

    return run_job(make_step, items, teacher, run, hub, report)


def paraphrase_main(
    pairs: PairsConfig, config: ParaphraseConfig, teacher: LLMConfig, run: RunConfig, hub: HubConfig
) -> RunSummary:
    """`r3forge annotate paraphrase`: the paraphrased-context baseline over the same pairs."""
    items = load_pairs(pairs)
    checks = ParaphraseChecks(config.min_ratio, config.max_ratio, config.max_copied)

    def make_step(tokenizer: Any) -> ParaphraseStep:
        return ParaphraseStep(config.template_path, checks, config.temperature, config.max_tokens, tokenizer)

    return run_job(make_step, items, teacher, run, hub)
