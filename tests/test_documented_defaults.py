"""What the guides say a default is, the code and the configs say too.

Three statements readers act on: the quickstart's stage list (README.md), the GRPO rollout engine's default
(wherever a guide names it), and the precision each config trains in (configs/README.md's table, and
README.md's rule that the CPU SFT configs say `bf16: auto` and the GRPO CPU config `bf16: false`).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from r3forge.agent.config import AgentScriptArguments
from r3forge.quickstart.plan import STAGE_NAMES

ROOT = Path(__file__).resolve().parents[1]
GUIDES = [
    "README.md",
    "recipes/README.md",
    "configs/README.md",
    "launch/README.md",
    "tests/benchmarks/README.md",
]


def section(text: str, heading: str) -> str:
    """The text under a markdown heading, up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    start = text.index(heading + "\n") + len(heading) + 1
    end = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, start)
    return text[start : end.start() if end else len(text)]


def table_rows(text: str) -> list[list[str]]:
    """The cells of every markdown table row in `text` (header and rule rows dropped)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|[-:| ]+\|", line.strip()):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[1:] if rows else rows


def test_the_readme_lists_the_quickstart_stages_the_code_runs_in_order():
    rows = table_rows(section((ROOT / "README.md").read_text(), "## What the quickstart does"))
    assert [r[1].strip("`") for r in rows] == list(STAGE_NAMES)
    assert [int(r[0]) for r in rows] == list(range(1, len(STAGE_NAMES) + 1))


# "the default `rollout_engine: auto`", "`rollout_engine: auto` (the default)", "`rollout_engine` (... default `auto`"
STATED_DEFAULT = re.compile(
    r"default,? `rollout_engine: (\w+)`|`rollout_engine: (\w+)`,? \(?(?:the )?default|`rollout_engine` \([^)]*default `(\w+)`"
)


def test_every_guide_that_names_the_rollout_engine_default_names_the_code_default():
    default = next(f.default for f in dataclasses.fields(AgentScriptArguments) if f.name == "rollout_engine")
    said = []
    for guide in GUIDES:
        text = (ROOT / guide).read_text() if (ROOT / guide).is_file() else ""
        said += [(guide, "".join(m)) for m in STATED_DEFAULT.findall(" ".join(text.split()))]
    assert said, "no guide states the rollout engine's default (the default `rollout_engine: <value>`)"
    assert [(g, v) for g, v in said if v != default] == []


def test_a_stated_default_is_found_in_each_phrasing():
    for text in ("the default `rollout_engine: x`", "`rollout_engine: x` (the default)",
                 "`rollout_engine` (`x` | `y`, default `x`; ...)"):  # fmt: skip
        assert ["".join(m) for m in STATED_DEFAULT.findall(text)] == ["x"]
    assert STATED_DEFAULT.findall("`rollout_engine: vllm` (own engine) | the default-path test") == []


def yaml_bf16(path: Path) -> str:
    """A config's top-level `bf16` as the guides write it: auto, true, false, or — when it has none."""
    value = (yaml.safe_load(path.read_text()) or {}).get("bf16", "—")
    return str(value).lower() if value != "—" else value


def test_the_configs_guide_gives_each_config_its_yaml_precision():
    rows = table_rows(section((ROOT / "configs/README.md").read_text(), "## Every config at a glance"))
    documented = {r[0].strip("`"): r[2].strip("`") for r in rows}
    every = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.yaml"))
    assert sorted(documented) == every  # one row per config, none missing, none stale
    assert {c: v for c, v in documented.items() if v != yaml_bf16(ROOT / c)} == {}


@pytest.mark.parametrize(
    "config, said",
    [(p, "auto") for p in sorted((ROOT / "configs" / "sft").glob("*_cpu.yaml"))]
    + [(ROOT / "configs" / "grpo" / "agent_world_cpu.yaml", "false")],
    ids=lambda x: x.name if isinstance(x, Path) else x,
)
def test_the_readme_precision_rule_holds_for_the_cpu_training_configs(config: Path, said: str):
    assert yaml_bf16(config) == said  # README.md, "Precision by CPU"
