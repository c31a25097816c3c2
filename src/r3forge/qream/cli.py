"""`r3forge annotate qream` (golden rewrites), `annotate qream-judge-probe` (the fact judges on a labelled
probe set) and `r3forge rewrite` (QREAM as a post-retrieval step); the
table: `r3forge.cli`."""

from __future__ import annotations

from r3forge.config import parse_config
from r3forge.models import check_models
from r3forge.qream.judge_probe import PROBE_CONFIGS, probe_main
from r3forge.qream.pipeline import QREAM_CONFIGS, check_retrieval, qream_main
from r3forge.qream.rewrite_command import REWRITE_CONFIGS, rewrite_main
from r3forge.synth.job import claim_job


def qream(argv: list[str]) -> int:
    config, _, _, run = configs = parse_config(QREAM_CONFIGS, argv, prog="r3forge annotate qream")
    check_models(*configs)
    check_retrieval(config)
    claim_job("annotate qream", run, configs)
    qream_main(*configs)
    return 0


def rewrite(argv: list[str]) -> int:
    config, _, _, run = configs = parse_config(REWRITE_CONFIGS, argv, prog="r3forge rewrite")
    check_models(*configs)
    check_retrieval(config)
    claim_job("rewrite", run, configs)
    rewrite_main(*configs)
    return 0


def judge_probe(argv: list[str]) -> int:
    config, _, run = configs = parse_config(PROBE_CONFIGS, argv, prog="r3forge annotate qream-judge-probe")
    check_models(*configs)
    check_retrieval(config)
    claim_job("annotate qream-judge-probe", run, configs)
    probe_main(*configs)
    return 0
