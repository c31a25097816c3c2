"""`r3forge annotate qream` (golden rewrites), `annotate qream-judge-probe` (the fact judges on a labelled
probe set) and `r3forge rewrite` (QREAM as a post-retrieval step); the
table: `r3forge.cli`."""

from __future__ import annotations

from r3forge.config import parse_config
from r3forge.models import check_models
from r3forge.qream.apply import REWRITE_CONFIGS, rewrite_main
from r3forge.qream.judge_probe import PROBE_CONFIGS, probe_main
from r3forge.qream.pipeline import QREAM_CONFIGS, check_retrieval, qream_main
from r3forge.synth.job import own_folder

# how `annotate qream` judges and selects its cached stages: a rerun may change it (a new tau re-thresholds the
# cached verdicts, another fact judge adds its own stage folder) and rewrites the outputs from the caches.
# The question count is a setting: the seeds are drawn from the questions left out.
SELECTION = (
    "fact_judge",
    "judge_tau",
    "lexical_threshold",
    "echo_guard",
    "selection",
    "validation_fraction",
    "orient_model",
)


def qream(argv: list[str]) -> int:
    configs = parse_config(QREAM_CONFIGS, argv, prog="r3forge annotate qream")
    check_models(*configs)
    check_retrieval(configs[0])
    own_folder("annotate qream", configs, scope=SELECTION)
    qream_main(*configs)
    return 0


def rewrite(argv: list[str]) -> int:
    configs = parse_config(REWRITE_CONFIGS, argv, prog="r3forge rewrite")
    check_models(*configs)
    check_retrieval(configs[0])
    own_folder("rewrite", configs, scope=())
    rewrite_main(*configs)
    return 0


def judge_probe(argv: list[str]) -> int:
    configs = parse_config(PROBE_CONFIGS, argv, prog="r3forge annotate qream-judge-probe")
    check_models(*configs)
    check_retrieval(configs[0])
    own_folder("annotate qream-judge-probe", configs, scope=())  # claims mix sentences across questions
    probe_main(*configs)
    return 0
