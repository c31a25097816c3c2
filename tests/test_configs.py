"""Every YAML recipe under configs/ parses into its config class (unknown keys would be errors)."""

from pathlib import Path

import pytest

from r3forge.annotate.verbal import VerbalAnnotateConfig
from r3forge.config import parse_config
from r3forge.demo import DemoConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CLASSES = {"demo.yaml": DemoConfig, "annotate/verbal_hotpotqa_cpu.yaml": VerbalAnnotateConfig}


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_config_parses_and_header_shows_launch_command(name: str):
    path = CONFIGS / name
    (config,) = parse_config((CLASSES[name],), ["--config", str(path)])
    assert config is not None
    header = [line for line in path.read_text().splitlines() if line.startswith("#")]
    assert any("r3forge " in line or "make " in line for line in header), f"{name}: no launch command"
