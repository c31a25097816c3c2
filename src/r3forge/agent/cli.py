"""The search agent's commands (the table: `r3forge.cli`): `r3forge data filter-closed-book`,
`r3forge data agent-warmstart`, `r3forge eval agent`, `r3forge eval tts`; `r3forge grpo` is the recipe,
`recipes/grpo.py`."""

from __future__ import annotations

from r3forge.agent import evaluate, tts
from r3forge.agent.data import FilterConfig
from r3forge.agent.data import filter_closed_book as filter_questions
from r3forge.agent.env import EnvConfig, SearchConfig
from r3forge.agent.warmstart import WarmstartArgs, write_warmstart
from r3forge.backends.open import LLMConfig
from r3forge.config import parse_config, where
from r3forge.errors import ConfigError
from r3forge.models import check_models
from r3forge.runfolder import check_file, claim_command


def filter_closed_book(argv: list[str]) -> int:
    config, generator = parse_config((FilterConfig, LLMConfig), argv, prog="r3forge data filter-closed-book")
    check_file(config.output, where(config, "output"))
    check_models(config, generator)
    filter_questions(config, generator)
    return 0


def warmstart(argv: list[str]) -> int:
    args, search, env = parse_config(
        (WarmstartArgs, SearchConfig, EnvConfig), argv, prog="r3forge data agent-warmstart"
    )
    check_file(args.output, where(args, "output"))
    check_models(args, search, env)
    write_warmstart(args, search, env)
    return 0


def eval_agent(argv: list[str]) -> int:
    configs = parse_config(evaluate.EVAL_AGENT_CONFIGS, argv, prog="r3forge eval agent")
    check_models(*configs)
    if configs[0].temperature < 0:
        raise ConfigError("temperature must be >= 0")
    claim_command(
        "eval agent", configs[0].output_dir, configs, configs[0].overwrite, ("config.yaml", "rows.jsonl")
    )
    evaluate.main(*configs)
    return 0


def tts_main(argv: list[str]) -> int:
    configs = parse_config(tts.TTS_CONFIGS, argv, prog="r3forge eval tts")
    check_models(*configs)
    claim_command(
        "eval tts", configs[0].output_dir, configs, configs[0].overwrite, ("config.yaml", "rows.jsonl")
    )
    tts.main(*configs)
    return 0
