"""`r3forge data synth-world|show|pool|filter-closed-book|agent-warmstart`."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from r3forge.agent.data import FilterConfig, filter_closed_book
from r3forge.agent.env import EnvConfig, SearchConfig
from r3forge.agent.warmstart import WarmstartArgs, write_warmstart
from r3forge.annotate.teacher import TeacherConfig
from r3forge.cli import subcommand_usage
from r3forge.config import parse_config
from r3forge.data import synth_world
from r3forge.data.loaders import load_corpus, load_qa, summarize
from r3forge.errors import ConfigError

SUBCOMMANDS = {
    "synth-world": "Invent the synthetic world: corpus + 1/2-hop questions (FlashRAG jsonl + HF datasets).",
    "show": "Load any supported file (format auto-detected) and print counts and the first records.",
    "pool": "Pool the passages of QA records into one de-duplicated corpus JSONL (to index with BM25/dense).",
    "filter-closed-book": "Drop questions the base generator answers closed-book in any of k samples (yes/no kept).",
    "agent-warmstart": "SFT rows of worked search trajectories (real observations) to warm-start a small agent.",
}


@dataclass
class ShowConfig:
    path: str = field(metadata={"help": "File, glob, folder or hf://org/name[:config][@split]."})
    kind: Literal["qa", "corpus"] = field(default="qa", metadata={"help": "Load as QA examples or passages."})
    format: str = field(default="auto", metadata={"help": "Format name, or 'auto' to detect it."})
    num_records: int = field(default=1, metadata={"help": "How many records to print."})


def show(config: ShowConfig) -> dict:
    load = load_qa if config.kind == "qa" else load_corpus
    ds = load(config.path, format=config.format)
    stats = summarize(ds)
    print(json.dumps(stats, indent=2))
    for record in ds.select(range(min(config.num_records, len(ds)))):
        print(json.dumps(record, ensure_ascii=False, indent=2)[:4000])
    return stats


@dataclass
class PoolConfig:
    qa_path: str = field(
        metadata={"help": "QA file(s) whose records carry passages (e.g. PopQA with paragraphs)."}
    )
    output: str = field(metadata={"help": "Corpus JSONL to write: {id, title, text} per distinct passage."})
    format: str = field(default="auto", metadata={"help": "QA format name, or 'auto' to detect it."})


def pool(config: PoolConfig) -> dict:
    """Write every distinct (title, text) passage of the QA records once, under the id of its first
    occurrence, so a retriever's hits map back to gold passages (by id, or by title via `gold_relevance`)."""
    ds = load_qa(config.qa_path, format=config.format)
    first: dict[tuple[str, str], str] = {}
    ids: set[str] = set()
    total = 0
    for record in ds:
        for p in record["passages"]:
            total += 1
            key = (p["title"], p["text"])
            if key in first:
                continue
            if p["id"] in ids:
                raise ConfigError(
                    f"{config.qa_path}: record {record['id']}: passage id {p['id']!r} names two texts"
                )
            ids.add(p["id"])
            first[key] = p["id"]
    if not first:
        raise ConfigError(f"qa_path: {config.qa_path}: no record carries passages; nothing to pool")
    out = Path(config.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for (title, text), pid in first.items():
            f.write(json.dumps({"id": pid, "title": title, "text": text}, ensure_ascii=False) + "\n")
    tmp.replace(out)
    stats = {"records": len(ds), "passages": total, "distinct": len(first), "output": str(out)}
    print(json.dumps(stats))
    return stats


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(subcommand_usage("data", SUBCOMMANDS))
        return 0
    sub, rest = argv[0], argv[1:]
    if sub == "synth-world":
        (cfg,) = parse_config((synth_world.SynthWorldConfig,), rest, prog="r3forge data synth-world")
        synth_world.main(cfg)
        return 0
    if sub == "show":
        (cfg,) = parse_config((ShowConfig,), rest, prog="r3forge data show")
        show(cfg)
        return 0
    if sub == "pool":
        (cfg,) = parse_config((PoolConfig,), rest, prog="r3forge data pool")
        pool(cfg)
        return 0
    if sub == "filter-closed-book":
        cfg, teacher = parse_config(
            (FilterConfig, TeacherConfig), rest, prog="r3forge data filter-closed-book"
        )
        filter_closed_book(cfg, teacher)
        return 0
    if sub == "agent-warmstart":
        args, search, env = parse_config((WarmstartArgs, SearchConfig, EnvConfig), rest,
                                         prog="r3forge data agent-warmstart")  # fmt: skip
        write_warmstart(args, search, env)
        return 0
    raise ConfigError(f"unknown subcommand 'data {sub}'; choose from {list(SUBCOMMANDS)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
