"""Accepted verbal annotations -> a prompt/completion chat dataset for SFT of the student reranker.

    dsd = export_sft(ExportSFTConfig(input_dir="runs/verbal", output_dir="runs/verbal-sft"))

Each row: `prompt` = [system?, user: the annotation instruction + question + document] (the teacher's own
prompt, rebuilt from the record with the template its prompt version names), `completion` = [assistant:
"Comment: ...\\nScore: s"], plus `question_id`, `doc_id`, `score`, `score_logprob`. Identical (question, doc)
pairs are deduplicated (first record kept), the train/validation split is by question (seeded), so no
question is in both splits, and score classes can be capped in the training split (validation keeps every
pair of its questions, so a student's ranking of them can be measured). Written with `save_to_disk` plus one JSONL per split.

With `judge_dir`, only the annotations a judge run approved are kept. A paraphrase run (the paraphrased-
context baseline) exports the same way: prompt = the paraphrase instruction + document, completion =
"Paraphrase: ...", dedup and split by document.
"""

from __future__ import annotations

import json
import random
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets

from r3forge.annotate import paraphrase, templates
from r3forge.annotate.judge import approvals
from r3forge.annotate.verbal import PROMPT_VERSION, annotation_text, load_template, render
from r3forge.data.rows import split_by_question
from r3forge.errors import ConfigError
from r3forge.synth.export import load_accepted
from r3forge.synth.store import read_manifest


@dataclass
class ExportSFTConfig:
    input_dir: str = field(metadata={"help": "Synthesis output folder of a verbal annotation run."})
    output_dir: str = field(metadata={"help": "Folder for the DatasetDict (save_to_disk) and <split>.jsonl."})
    template_path: str | None = field(
        default=None, metadata={"help": "The template of a run with a custom prompt (else the built-in)."}
    )
    system_prompt: str = field(default="", metadata={"help": "Optional system message of every prompt."})
    validation_fraction: float = field(
        default=0.1, metadata={"help": "Share of questions (not rows) held out for validation."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of the question split and of the rebalancing."})
    balance_ratio: float | None = field(
        default=None,
        metadata={"help": "Cap each score class of the training split at this multiple of the rarest."},
    )
    max_per_score: int | None = field(
        default=None, metadata={"help": "Cap each score class of the training split at N rows."}
    )
    judge_dir: str = field(
        default="", metadata={"help": "Keep only annotations this judge run approved (annotate judge)."}
    )
    score_first: bool = field(
        default=False,
        metadata={"help": "Variant, not the paper's format: completions 'Score: s' then 'Comment: ...'."},
    )
    overwrite: bool = field(
        default=False, metadata={"help": "Move an existing output folder aside to <folder>.replaced-<time>."}
    )


def chat_prompt(user: str, system_prompt: str = "") -> list[dict[str, str]]:
    """[system?, user] messages of an SFT prompt."""
    return ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": user}
    ]


def sft_row(
    record: dict[str, Any], template: str, system_prompt: str = "", score_first: bool = False
) -> dict[str, Any]:
    """One accepted annotation (flat: question, doc_*, comment, score) -> a prompt/completion row (the
    completion in the paper's comment-then-score order, or score first: `annotation_text`)."""
    user = render(template, record["question"], record["doc_title"], record["doc_text"])
    prompt = chat_prompt(user, system_prompt)
    text = annotation_text(record["comment"], int(record["score"]), score_first)
    completion = [{"role": "assistant", "content": text}]
    group = (
        {"group_id": str(record["group_id"])} if record.get("group_id") else {}
    )  # split key (sub-questions)
    return group | {
        "prompt": prompt,
        "completion": completion,
        "question_id": str(record["question_id"]),
        "doc_id": str(record["doc_id"]),
        "score": int(record["score"]),
        "score_logprob": record.get("score_logprob"),
        "relevance": record.get("relevance"),  # gold label where the pairs have one (NDCG of the student)
        "doc_text": record["doc_text"],  # the passage as the prompt shows it (quote faithfulness)
    }


def paraphrase_row(record: dict[str, Any], template: str, system_prompt: str = "") -> dict[str, Any]:
    """One accepted paraphrase (doc_*, paraphrase) -> a prompt/completion row (the ablation's student)."""
    user = templates.fill(template, {"title": record["doc_title"], "document": record["doc_text"]})
    prompt = chat_prompt(user, system_prompt)
    completion = [{"role": "assistant", "content": f"Paraphrase: {record['paraphrase']}"}]
    # split and dedup by document: a paraphrase does not depend on the question
    return {
        "prompt": prompt,
        "completion": completion,
        "question_id": str(record["doc_id"]),
        "doc_id": str(record["doc_id"]),
    }


def judged(records: list[dict[str, Any]], keys: list[str], judge_dir: str) -> list[dict[str, Any]]:
    """The records a judge run approved (by annotation key); prints approved / disapproved / unjudged."""
    verdicts = approvals(judge_dir)
    kept = [r for r, k in zip(records, keys, strict=True) if verdicts.get(k) is True]
    unjudged = sum(k not in verdicts for k in keys)
    print(
        f"export-sft: judge {judge_dir}: {len(kept)} approved, {len(keys) - len(kept) - unjudged} not "
        f"approved, {unjudged} not judged (dropped)",
        file=sys.stderr,
    )
    return kept


def dedup(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep the first record of each (question_id, doc_id)."""
    seen, out = set(), []
    for r in records:
        key = (str(r["question_id"]), str(r["doc_id"]))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def rebalance(
    records: list[dict[str, Any]], ratio: float | None, max_per_score: int | None, seed: int
) -> list[dict[str, Any]]:
    """Cap every score class at `ratio` x the rarest class and/or `max_per_score` (a seeded sample of each
    class; input order kept)."""
    by_score: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        by_score[int(r["score"])].append(i)
    if not by_score:
        return records
    caps = [c for c in (max_per_score,) if c is not None]
    if ratio is not None:
        caps.append(int(ratio * min(len(v) for v in by_score.values())))
    if not caps:
        return records
    cap, rng, keep = min(caps), random.Random(seed), set()
    for score in sorted(by_score):
        indices = by_score[score]
        keep.update(indices if len(indices) <= cap else rng.sample(indices, cap))
    return [r for i, r in enumerate(records) if i in keep]


def build_sft(
    records: Iterable[dict[str, Any]], config: ExportSFTConfig, template: str, row: Callable = sft_row
) -> datasets.DatasetDict:
    """Flat accepted annotations -> the split `DatasetDict` (dedup, rebalance, split by question)."""
    if not 0 <= config.validation_fraction < 1:
        raise ConfigError(f"validation_fraction must be in [0, 1), got {config.validation_fraction}")
    verbal = row is sft_row
    if config.score_first and not verbal:
        raise ConfigError("score_first applies to verbal annotations, not to paraphrases")
    extra = (config.score_first,) if verbal else ()
    rows = dedup(row(r, template, config.system_prompt, *extra) for r in records)
    train, validation = split_by_question(rows, config.validation_fraction, config.seed)
    if verbal:  # the training split only: held-out questions keep every pair (a ranking needs them)
        train = rebalance(train, config.balance_ratio, config.max_per_score, config.seed)
    # an empty split is left out: datasets cannot load a saved split without rows
    return datasets.DatasetDict(
        {
            name: datasets.Dataset.from_list(split)
            for name, split in (("train", train), ("validation", validation))
            if split
        }
    )


def check_run(input_dir: str) -> dict[str, Any]:
    """The manifest of an annotation run folder; a clear error for a folder that is none (a typo, or the
    parent of a sharded run's shard folders, which `r3forge synth merge` combines first)."""
    manifest = read_manifest(input_dir)
    if manifest is not None:
        return manifest
    root = Path(input_dir)
    shards = sorted(str(p) for p in root.glob("*") if p.is_dir() and read_manifest(p) is not None)
    if shards:
        raise ConfigError(
            f"input_dir {input_dir}: holds the shard folders {shards}, not one run; merge them first: "
            f"r3forge synth merge --inputs {' '.join(shards)} --output_dir {root / 'all'} (then --input_dir "
            f"{root / 'all'})"
        )
    state = "is not a folder" if not root.is_dir() else "has no manifest.json"
    raise ConfigError(f"input_dir {input_dir}: {state}; not the output folder of an annotation run")


def export_sft(config: ExportSFTConfig) -> datasets.DatasetDict:
    """Read a run's accepted records, build the SFT `DatasetDict`, write it (save_to_disk + JSONL).

    Refuses (ConfigError) a folder that is not an annotation run and an export without a single row (every
    annotation rejected or not judge-approved), which would leave an SFT set that `r3forge sft` cannot read."""
    manifest = check_run(config.input_dir)
    accepted = load_accepted(config.input_dir)
    steps = set(accepted["step"]) if len(accepted) else {"verbal_annotation"}
    if steps == {"paraphrase_context"}:
        template, version = paraphrase.load_template(config.template_path)
        builtin, row = paraphrase.PROMPT_VERSION, paraphrase_row
    elif steps == {"verbal_annotation"}:
        template, version = load_template(config.template_path)
        builtin, row = PROMPT_VERSION, sft_row
    else:
        raise ConfigError(f"{config.input_dir}: records of step(s) {sorted(steps)}: not annotations")
    versions = {v.split("+")[0] for v in accepted["version"]} if len(accepted) else set()
    if versions - {version}:
        hint = "" if config.template_path else f" (the built-in is {builtin}: pass template_path)"
        raise ConfigError(
            f"{config.input_dir}: annotated with prompt {sorted(versions)}, not {version}{hint}"
        )
    records = [{**r} for r in accepted]
    if config.judge_dir:
        records = judged(records, list(accepted["key"]), config.judge_dir)
    out = Path(config.output_dir)
    if out.exists() and any(out.iterdir()) and not config.overwrite:
        raise ConfigError(f"{out}: exists and is not empty; pass overwrite=true or choose another folder")
    dsd = build_sft(records, config, template, row)
    if not dsd.num_rows:
        judge = f", {len(records)} judge-approved ({config.judge_dir})" if config.judge_dir else ""
        raise ConfigError(
            f"input_dir {config.input_dir}: nothing to export: {len(accepted)} accepted annotation(s){judge}, "
            f"{manifest.get('rejected', 0)} rejected {manifest.get('reject_reasons', {})}; see its rejected "
            "records (`r3forge annotate report --input_dir ...`)"
        )
    write_sft(dsd, out)
    return dsd


def write_sft(dsd: datasets.DatasetDict, out: Path) -> None:
    """`save_to_disk` plus one `<split>.jsonl` per split (for reading and diffing without datasets)."""
    dsd.save_to_disk(str(out))
    for name, split in dsd.items():
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for row in split:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
