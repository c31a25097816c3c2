"""Every YAML recipe under configs/ parses into its config class (unknown keys would be errors)."""

from pathlib import Path

import pytest

from r3forge.annotate.jobs import JUDGE_CONFIGS, PARAPHRASE_CONFIGS, VERBAL_CONFIGS
from r3forge.config import parse_config
from r3forge.demo import DemoConfig
from r3forge.qream.apply import REWRITE_CONFIGS
from r3forge.qream.pipeline import QREAM_CONFIGS

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CLASSES = {
    "demo.yaml": (DemoConfig,),
    "annotate/verbal_hotpotqa_cpu.yaml": VERBAL_CONFIGS,
    "annotate/verbal_nq_gptoss120b.yaml": VERBAL_CONFIGS,
    "annotate/judge_hotpotqa_cpu.yaml": JUDGE_CONFIGS,
    "annotate/paraphrase_hotpotqa_cpu.yaml": PARAPHRASE_CONFIGS,
    "annotate/qream_hotpotqa_cpu.yaml": QREAM_CONFIGS,
    "annotate/qream_llama3_8b.yaml": QREAM_CONFIGS,
    "rewrite/qream_icl_hotpotqa_cpu.yaml": REWRITE_CONFIGS,
    "rewrite/qream_ft_llama32_1b.yaml": REWRITE_CONFIGS,
}


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_config_parses_and_header_shows_launch_command(name: str):
    path = CONFIGS / name
    configs = parse_config(CLASSES[name], ["--config", str(path)])
    assert len(configs) == len(CLASSES[name])
    header = [line for line in path.read_text().splitlines() if line.startswith("#")]
    assert any("r3forge " in line or "make " in line for line in header), f"{name}: no launch command"


def test_every_recipe_is_covered():
    assert {
        str(p.relative_to(CONFIGS)) for p in CONFIGS.rglob("*.yaml") if "retrieval" not in p.parts
    } == set(CLASSES)
