"""`r3forge annotate verbal|judge|paraphrase|report|export-sft`."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from r3forge.annotate import jobs
from r3forge.annotate.export import ExportSFTConfig, export_sft
from r3forge.annotate.report import annotation_report, format_report
from r3forge.annotate.rules import RulesConfig, rules_main
from r3forge.cli import subcommand_usage
from r3forge.config import parse_config
from r3forge.errors import ConfigError
from r3forge.qream.pipeline import QREAM_CONFIGS, qream_main

SUBCOMMANDS = {
    "verbal": "Teacher comment + 1-5 relevance score per (question, document) pair (cached, resumable).",
    "judge": "A second model approves (or not) each accepted annotation; prints the approval rate.",
    "paraphrase": "The paraphrased-context baseline: the teacher rewrites each document, no commentary.",
    "qream": "QREAM: stylistic seeds, N rewriting rounds, utility + fidelity scoring, golden rewrites.",
    "report": "Acceptance, reject reasons, score distribution, NDCG@k of teacher scores vs gold relevance.",
    "rules": "Rule-labelled annotations from gold supporting facts (HotpotQA) as an SFT dataset.",
    "export-sft": "Accepted annotations -> prompt/completion chat SFT dataset, split by question.",
}


@dataclass
class ReportArgs:
    input_dir: str = field(metadata={"help": "Output folder of a verbal annotation run."})


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(subcommand_usage("annotate", SUBCOMMANDS))
        return 0
    sub, rest = argv[0], argv[1:]
    prog = f"r3forge annotate {sub}"
    if sub == "verbal":
        jobs.verbal_main(*parse_config(jobs.VERBAL_CONFIGS, rest, prog=prog))
    elif sub == "judge":
        jobs.judge_main(*parse_config(jobs.JUDGE_CONFIGS, rest, prog=prog))
    elif sub == "paraphrase":
        jobs.paraphrase_main(*parse_config(jobs.PARAPHRASE_CONFIGS, rest, prog=prog))
    elif sub == "qream":
        qream_main(*parse_config(QREAM_CONFIGS, rest, prog=prog))
    elif sub == "report":
        (args,) = parse_config((ReportArgs,), rest, prog=prog)
        print(format_report(annotation_report(args.input_dir)))
    elif sub == "rules":
        (cfg,) = parse_config((RulesConfig,), rest, prog=prog)
        print(json.dumps(rules_main(cfg)))
    elif sub == "export-sft":
        (cfg,) = parse_config((ExportSFTConfig,), rest, prog=prog)
        export_sft(cfg)
    else:
        raise ConfigError(f"unknown subcommand 'annotate {sub}'; choose from {list(SUBCOMMANDS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
