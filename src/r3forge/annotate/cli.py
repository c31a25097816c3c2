"""`r3forge annotate verbal|export-sft`."""

from __future__ import annotations

import sys

from r3forge.annotate.export import ExportSFTConfig, export_sft
from r3forge.annotate.verbal import VerbalAnnotateConfig
from r3forge.annotate.verbal import main as annotate_verbal
from r3forge.cli import subcommand_usage
from r3forge.config import parse_config
from r3forge.errors import ConfigError

SUBCOMMANDS = {
    "verbal": "Teacher comment + 1-5 relevance score per (question, document) pair (cached, resumable).",
    "export-sft": "Accepted annotations -> prompt/completion chat SFT dataset, split by question.",
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(subcommand_usage("annotate", SUBCOMMANDS))
        return 0
    sub, rest = argv[0], argv[1:]
    if sub == "verbal":
        (cfg,) = parse_config((VerbalAnnotateConfig,), rest, prog="r3forge annotate verbal")
        annotate_verbal(cfg)
        return 0
    if sub == "export-sft":
        (cfg,) = parse_config((ExportSFTConfig,), rest, prog="r3forge annotate export-sft")
        export_sft(cfg)
        return 0
    raise ConfigError(f"unknown subcommand 'annotate {sub}'; choose from {list(SUBCOMMANDS)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
