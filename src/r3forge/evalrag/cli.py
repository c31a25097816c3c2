"""`r3forge eval rag|report` (the table: `r3forge.cli`; `eval agent|tts` are the agent's, `r3forge.agent.cli`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from r3forge.config import parse_config
from r3forge.errors import ConfigError
from r3forge.evalrag import pipeline
from r3forge.evalrag.plots import write_report
from r3forge.evalrag.report import load_eval_rows
from r3forge.evalrag.tuning import write_tuned
from r3forge.models import check_models
from r3forge.runfolder import claim_command

# the extent of the sweep: every probe, score and answer is cached, so a rerun may grow it in place (the
# outputs are rewritten from the caches); every other setting decides what the cached results mean


@dataclass
class ReportArgs:
    runs: list[str] = field(metadata={"help": "`eval rag` run folders whose rows.jsonl go into one report."})
    output_dir: str = field(metadata={"help": "Where summary.json, table.md and the PNG plots are written."})
    overwrite: bool = field(
        default=False, metadata={"help": "Move a folder of another run aside to <folder>.replaced-<time>."}
    )


def report_main(args: ReportArgs) -> dict:
    rows = []
    for run in args.runs:
        path = Path(run) / "rows.jsonl"
        if not path.is_file():
            raise ConfigError(f"runs: {run} has no rows.jsonl (not an `r3forge eval rag` run folder?)")
        rows += load_eval_rows(path)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = write_report(rows, out)
    write_tuned(rows, out)
    print((out / "table.md").read_text(encoding="utf-8"))
    print((out / "tuned.md").read_text(encoding="utf-8"))
    return paths


def rag(argv: list[str]) -> int:
    configs = parse_config(pipeline.EVAL_CONFIGS, argv, prog="r3forge eval rag")
    check_models(*configs)
    config = configs[0]
    claim_command("eval rag", config.output_dir, configs, config.overwrite, ("config.yaml", "rows.jsonl"))
    pipeline.eval_main(*configs)
    return 0


def report(argv: list[str]) -> int:
    (args,) = parse_config((ReportArgs,), argv, prog="r3forge eval report")
    claim_command("eval report", args.output_dir, [args], args.overwrite)
    report_main(args)
    return 0
