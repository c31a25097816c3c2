"""Every YAML recipe under configs/ parses into its config class (unknown keys would be errors)."""

from pathlib import Path

import pytest
import yaml

from r3forge.agent.config import GRPO_CONFIGS
from r3forge.agent.evaluate import EVAL_AGENT_CONFIGS, EvalAgentConfig
from r3forge.agent.tts import TTSConfig
from r3forge.annotate.jobs import JUDGE_CONFIGS, PARAPHRASE_CONFIGS, VERBAL_CONFIGS
from r3forge.config import parse_config
from r3forge.demo import DemoConfig
from r3forge.evalrag.pipeline import EVAL_CONFIGS
from r3forge.qream.pipeline import QREAM_CONFIGS
from r3forge.qream.rewrite_command import REWRITE_CONFIGS
from r3forge.quickstart import QuickstartConfig
from r3forge.sft.config import SFT_CONFIGS

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CLASSES = {
    "demo.yaml": (DemoConfig,),
    "quickstart.yaml": (QuickstartConfig,),
    "annotate/verbal_world_cpu.yaml": VERBAL_CONFIGS,
    "annotate/verbal_hotpotqa_cpu.yaml": VERBAL_CONFIGS,
    "annotate/verbal_nq_gptoss120b.yaml": VERBAL_CONFIGS,
    "annotate/judge_hotpotqa_cpu.yaml": JUDGE_CONFIGS,
    "annotate/paraphrase_hotpotqa_cpu.yaml": PARAPHRASE_CONFIGS,
    "annotate/qream_hotpotqa_cpu.yaml": QREAM_CONFIGS,
    "annotate/qream_llama3_8b.yaml": QREAM_CONFIGS,
    "rewrite/qream_icl_hotpotqa_cpu.yaml": REWRITE_CONFIGS,
    "rewrite/qream_ft_llama32_1b.yaml": REWRITE_CONFIGS,
    "sft/verbal_reranker_cpu.yaml": SFT_CONFIGS,
    "sft/verbal_reranker_world_cpu.yaml": SFT_CONFIGS,
    "sft/qream_ft_cpu.yaml": SFT_CONFIGS,
    "eval/igp_hotpotqa_cpu.yaml": EVAL_CONFIGS,
    "eval/igp_hotpotqa_bm25_cpu.yaml": EVAL_CONFIGS,
    "eval/igp_popqa_bm25_cpu.yaml": EVAL_CONFIGS,
    "eval/igp_world_cpu.yaml": EVAL_CONFIGS,
    "eval/igp_qwen2.5-7b_vllm.yaml": EVAL_CONFIGS,
    "eval/agent_world_cpu.yaml": EVAL_AGENT_CONFIGS,
    "eval/tts_world_cpu.yaml": (EvalAgentConfig, TTSConfig, *EVAL_AGENT_CONFIGS[1:]),
    "sft/agent_warmstart_cpu.yaml": SFT_CONFIGS,
    "grpo/agent_world_cpu.yaml": GRPO_CONFIGS,
}
# GPU recipes: bf16 is refused on a machine without a GPU, so they are parsed with it switched off
GPU_CLASSES = {
    "sft/verbal_reranker_qwen2.5-1.5b.yaml": SFT_CONFIGS,
    "sft/verbal_reranker_qwen2.5-3b.yaml": SFT_CONFIGS,
    "sft/qream_ft_llama3.2-1b.yaml": SFT_CONFIGS,
    "grpo/agent_qwen2.5-3b.yaml": GRPO_CONFIGS,
}


@pytest.mark.parametrize("name", sorted(CLASSES | GPU_CLASSES))
def test_config_parses_and_header_shows_launch_command(name: str):
    path = CONFIGS / name
    classes = CLASSES.get(name) or GPU_CLASSES[name]
    flags = ["--bf16", "false"] if name in GPU_CLASSES else []
    configs = parse_config(classes, ["--config", str(path), *flags])
    assert len(configs) == len(classes)
    if name in GPU_CLASSES:
        assert yaml.safe_load(path.read_text())["bf16"] is True  # the YAML itself trains in bf16
    header = [line for line in path.read_text().splitlines() if line.startswith("#")]
    launch = ("r3forge ", "make ", "accelerate launch")
    assert any(any(c in line for c in launch) for line in header), f"{name}: no launch command"


def test_every_recipe_is_covered():
    assert {
        str(p.relative_to(CONFIGS))
        for p in CONFIGS.rglob("*.yaml")
        if not {"retrieval", "accelerate"} & set(p.parts)
    } == set(CLASSES | GPU_CLASSES)
