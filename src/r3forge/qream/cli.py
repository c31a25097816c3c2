"""`r3forge annotate qream` (golden rewrites), `annotate qream-judge-probe` (the fact judges on a labelled
probe set) and `r3forge rewrite` (QREAM as a post-retrieval step); the
table: `r3forge.cli`."""

from __future__ import annotations

from r3forge.config import parse_config
from r3forge.qream.apply import REWRITE_CONFIGS, rewrite_main
from r3forge.qream.judge_probe import PROBE_CONFIGS, probe_main
from r3forge.qream.pipeline import QREAM_CONFIGS, qream_main


def qream(argv: list[str]) -> int:
    qream_main(*parse_config(QREAM_CONFIGS, argv, prog="r3forge annotate qream"))
    return 0


def rewrite(argv: list[str]) -> int:
    rewrite_main(*parse_config(REWRITE_CONFIGS, argv, prog="r3forge rewrite"))
    return 0


def judge_probe(argv: list[str]) -> int:
    probe_main(*parse_config(PROBE_CONFIGS, argv, prog="r3forge annotate qream-judge-probe"))
    return 0
