"""`r3forge annotate verbal|judge|paraphrase|report|rules|export-sft` (the table: `r3forge.cli`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from r3forge.annotate import jobs
from r3forge.annotate.export import ExportSFTConfig, export_sft
from r3forge.annotate.report import annotation_report, format_report
from r3forge.annotate.rules import RulesConfig, rules_main
from r3forge.config import parse_config


@dataclass
class ReportArgs:
    input_dir: str = field(metadata={"help": "Output folder of a verbal annotation run."})


def verbal(argv: list[str]) -> int:
    jobs.verbal_main(*parse_config(jobs.VERBAL_CONFIGS, argv, prog="r3forge annotate verbal"))
    return 0


def judge(argv: list[str]) -> int:
    jobs.judge_main(*parse_config(jobs.JUDGE_CONFIGS, argv, prog="r3forge annotate judge"))
    return 0


def paraphrase(argv: list[str]) -> int:
    jobs.paraphrase_main(*parse_config(jobs.PARAPHRASE_CONFIGS, argv, prog="r3forge annotate paraphrase"))
    return 0


def report(argv: list[str]) -> int:
    (args,) = parse_config((ReportArgs,), argv, prog="r3forge annotate report")
    print(format_report(annotation_report(args.input_dir)))
    return 0


def rules(argv: list[str]) -> int:
    (cfg,) = parse_config((RulesConfig,), argv, prog="r3forge annotate rules")
    print(json.dumps(rules_main(cfg)))
    return 0


def export_sft_main(argv: list[str]) -> int:
    (cfg,) = parse_config((ExportSFTConfig,), argv, prog="r3forge annotate export-sft")
    export_sft(cfg)
    return 0
