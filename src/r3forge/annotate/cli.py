"""`r3forge annotate verbal|judge|paraphrase|report|rules|export-sft` (the table: `r3forge.cli`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from r3forge.annotate import jobs
from r3forge.annotate.export import ExportSFTConfig, export_sft
from r3forge.annotate.report import annotation_report, format_report
from r3forge.annotate.rules import RulesConfig, rules_main
from r3forge.config import parse_config
from r3forge.models import check_models
from r3forge.runfolder import claim_command, record_owner
from r3forge.synth.job import claim_job

DATASET = ("dataset_dict.json",)  # what an SFT export folder made before owner records holds


@dataclass
class ReportArgs:
    input_dir: str = field(metadata={"help": "Output folder of a verbal annotation run."})


def verbal(argv: list[str]) -> int:
    _, _, _, run, _ = configs = parse_config(jobs.VERBAL_CONFIGS, argv, prog="r3forge annotate verbal")
    check_models(*configs)
    claim_job("annotate verbal", run, configs)
    jobs.verbal_main(*configs)
    return 0


def judge(argv: list[str]) -> int:
    _, _, run, _ = configs = parse_config(jobs.JUDGE_CONFIGS, argv, prog="r3forge annotate judge")
    check_models(*configs)
    claim_job("annotate judge", run, configs)
    jobs.judge_main(*configs)
    return 0


def paraphrase(argv: list[str]) -> int:
    _, _, _, run, _ = configs = parse_config(
        jobs.PARAPHRASE_CONFIGS, argv, prog="r3forge annotate paraphrase"
    )
    check_models(*configs)
    claim_job("annotate paraphrase", run, configs)
    jobs.paraphrase_main(*configs)
    return 0


def report(argv: list[str]) -> int:
    (args,) = parse_config((ReportArgs,), argv, prog="r3forge annotate report")
    print(format_report(annotation_report(args.input_dir)))
    return 0


def rules(argv: list[str]) -> int:
    (cfg,) = parse_config((RulesConfig,), argv, prog="r3forge annotate rules")
    wanted = claim_command("annotate rules", cfg.output_dir, [cfg], cfg.overwrite, DATASET, write=False)
    print(json.dumps(rules_main(cfg)))
    record_owner(cfg.output_dir, "annotate rules", wanted)
    return 0


def export_sft_main(argv: list[str]) -> int:
    (cfg,) = parse_config((ExportSFTConfig,), argv, prog="r3forge annotate export-sft")
    wanted = claim_command("annotate export-sft", cfg.output_dir, [cfg], cfg.overwrite, DATASET, write=False)
    export_sft(cfg)
    record_owner(cfg.output_dir, "annotate export-sft", wanted)
    return 0
