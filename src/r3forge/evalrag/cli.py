"""`r3forge eval rag|report|agent|tts`."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from r3forge.agent import evaluate as eval_agent
from r3forge.agent import tts
from r3forge.cli import subcommand_usage
from r3forge.config import parse_config
from r3forge.errors import ConfigError
from r3forge.evalrag import pipeline
from r3forge.evalrag.report import load_rows, write_report
from r3forge.evalrag.tuning import write_tuned

SUBCOMMANDS = {
    "rag": "Single-turn RAG: retrieve -> rerank/admit (IGP, verbal, baselines) -> Top-M -> answer -> score.",
    "report": "One table and plots over several `eval rag` run folders (e.g. one per dataset).",
    "agent": "Multi-turn search agent on held-out questions: EM/F1, searches, RA-R, CUE-R.",
    "tts": "Test-time scaling: relevance-guided vs majority voting (with/without unique queries), reranker calls.",
}


@dataclass
class ReportArgs:
    runs: list[str] = field(metadata={"help": "`eval rag` run folders whose rows.jsonl go into one report."})
    output_dir: str = field(metadata={"help": "Where summary.json, table.md and the PNG plots are written."})


def report_main(args: ReportArgs) -> dict:
    rows = []
    for run in args.runs:
        path = Path(run) / "rows.jsonl"
        if not path.is_file():
            raise ConfigError(f"runs: {run} has no rows.jsonl (not an `r3forge eval rag` run folder?)")
        rows += load_rows(path)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = write_report(rows, out)
    write_tuned(rows, out)
    print((out / "table.md").read_text(encoding="utf-8"))
    print((out / "tuned.md").read_text(encoding="utf-8"))
    return paths


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(subcommand_usage("eval", SUBCOMMANDS))
        return 0
    sub, rest = argv[0], argv[1:]
    if sub == "rag":
        return pipeline.cli(rest)
    if sub == "agent":
        return eval_agent.cli(rest)
    if sub == "tts":
        return tts.cli(rest)
    if sub == "report":
        (args,) = parse_config((ReportArgs,), rest, prog="r3forge eval report")
        report_main(args)
        return 0
    raise ConfigError(f"unknown subcommand 'eval {sub}'; choose from {list(SUBCOMMANDS)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
