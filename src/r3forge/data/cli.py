"""`r3forge data synth-world|show`."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Literal

from r3forge.cli import subcommand_usage
from r3forge.config import parse_config
from r3forge.data import synth_world
from r3forge.data.loaders import load_corpus, load_qa, summarize
from r3forge.errors import ConfigError

SUBCOMMANDS = {
    "synth-world": "Invent the synthetic world: corpus + 1/2-hop questions (FlashRAG jsonl + HF datasets).",
    "show": "Load any supported file (format auto-detected) and print counts and the first records.",
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
    raise ConfigError(f"unknown subcommand 'data {sub}'; choose from {list(SUBCOMMANDS)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
