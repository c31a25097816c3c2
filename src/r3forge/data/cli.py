"""`r3forge data synth-world|show|pool` (the table: `r3forge.cli`; `data filter-closed-book|agent-warmstart`
are the agent's, `r3forge.agent.cli`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from r3forge.config import parse_config, where
from r3forge.data import synth_world, world_files
from r3forge.data.jsonio import write_jsonl
from r3forge.data.loaders import load_corpus, load_qa, summarize
from r3forge.errors import ConfigError
from r3forge.runfolder import check_file, claim_command, record_owner


@dataclass
class WorldOutputArgs:
    overwrite: bool = field(
        default=False,
        metadata={"help": "Move a folder of another world (or run) aside to <folder>.replaced-<time>."},
    )


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
    write_jsonl(out, ({"id": pid, "title": title, "text": text} for (title, text), pid in first.items()))
    stats = {"records": len(ds), "passages": total, "distinct": len(first), "output": str(out)}
    print(json.dumps(stats))
    return stats


def synth_world_main(argv: list[str]) -> int:
    classes = (synth_world.SynthWorldConfig, WorldOutputArgs)
    cfg, out = parse_config(classes, argv, prog="r3forge data synth-world")
    # the same settings make the same bytes: a rerun replaces the folder by its copy
    world = (world_files.FILES["world"],)
    wanted = claim_command("data synth-world", cfg.output_dir, [cfg], out.overwrite, world, write=False)
    world_files.main(cfg)
    record_owner(cfg.output_dir, "data synth-world", wanted)
    return 0


def show_main(argv: list[str]) -> int:
    (cfg,) = parse_config((ShowConfig,), argv, prog="r3forge data show")
    show(cfg)
    return 0


def pool_main(argv: list[str]) -> int:
    (cfg,) = parse_config((PoolConfig,), argv, prog="r3forge data pool")
    check_file(cfg.output, where(cfg, "output"))
    pool(cfg)
    return 0
