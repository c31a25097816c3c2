"""The paper configs' headers as a runbook, checked without running it (default suite, seconds):

- every header command exists and its flags parse (each `r3forge ...` / `-m module` command line is parsed by
  the command's own parser, `--help` appended, so nothing runs);
- every server a header starts serves what its config sends (port, served name, enough logprobs);
- the chain's paths meet (what one command writes is what the next reads);
- the batch arithmetic as written, for the cluster world size each launch line implies, through TRL's own
  `GRPOConfig` checks (the CPU tier runs them with smaller batches).
"""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from trl import GRPOConfig, SFTConfig

from r3forge.agent.config import GRPO_CONFIGS, PAPER_DEFAULTS
from r3forge.cli import main as r3forge_main
from r3forge.config import parse_config
from r3forge.sft.config import SFT_CONFIGS

from .conftest import BIN, REPO
from .headers import CONFIGS, flag, header_command, header_commands, served_model, split_env

PAPER_CONFIGS = (
    "annotate/verbal_nq_gptoss120b.yaml",
    "annotate/qream_llama3_8b.yaml",
    "sft/verbal_reranker_qwen2.5-1.5b.yaml",
    "sft/verbal_reranker_qwen2.5-3b.yaml",
    "sft/qream_ft_llama3.2-1b.yaml",
    "grpo/agent_qwen2.5-3b.yaml",
    "eval/igp_qwen2.5-7b_vllm.yaml",
    "rewrite/qream_ft_llama32_1b.yaml",
    "retrieval/e5_base_hnsw.yaml",
)
GPUS_PER_NODE = 4  # launch/sft_multinode_slurm.sh's default (#SBATCH --gpus-per-node=4)


def written(config: str) -> dict:
    return yaml.safe_load((CONFIGS / config).read_text())


def parses(argv: list[str], run) -> None:
    """`run(argv + --help)` exits 0 after the command's own parser accepted every flag (nothing runs)."""
    at = argv.index("--") if "--" in argv else len(argv)
    with pytest.raises(SystemExit) as exit_:
        code = run([*argv[:at], "--help", *argv[at:]])
        raise AssertionError(f"did not parse: {' '.join(argv)} (exit {code}, no --help)")
    assert exit_.value.code in (0, None), " ".join(argv)


def run_module(module: str):
    def run(argv: list[str]) -> int:
        sys.argv = [module, *argv]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0

    return run


@pytest.mark.parametrize("config", PAPER_CONFIGS)
def test_header_commands_exist_and_parse(config: str, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    commands = header_commands(config)
    assert commands, f"configs/{config}: no launch command in the header"
    for command in commands:
        env, cmd = split_env(command)
        if cmd[0] == "r3forge":
            parses(cmd[1:], r3forge_main)
        elif cmd[:2] == ["accelerate", "launch"]:
            assert (REPO / flag(cmd, "--config_file")).is_file(), command
            at = cmd.index("-m")
            parses(cmd[at + 2 :], run_module(cmd[at + 1]))
        elif cmd[0] == "sbatch":
            script = next(t for t in cmd if t.startswith("launch/"))
            assert (REPO / script).is_file(), command
            if script == "launch/sft_multinode_slurm.sh":
                rest = cmd[cmd.index(script) + 1 :]
                extra = rest[rest.index("--") + 1 :] if "--" in rest else []
                parses(["--config", rest[0], *extra], run_module(env.get("MODULE", "r3forge.sft")))
        elif cmd[0].startswith("launch/"):
            assert (REPO / cmd[0]).is_file(), command
        elif cmd[:2] == ["vllm", "serve"]:
            assert served_model(command, "-").name == cmd[2]  # GPU builds: the `vllm` console script
        else:
            assert cmd[0] == "hf" and (BIN / "hf").is_file(), (
                command
            )  # huggingface_hub's CLI (no huggingface-cli)
    capsys.readouterr()


def port(command: list[str]) -> int:
    env, _ = split_env(command)
    return int(flag(command, "--port") or env.get("PORT", 8000))


@pytest.mark.parametrize(
    ("config", "prefix", "index", "url", "name"),
    [
        ("annotate/verbal_nq_gptoss120b.yaml", ("launch/serve_vllm.sh",), 0, "base_url", "model"),
        ("annotate/qream_llama3_8b.yaml", ("launch/serve_vllm.sh",), 0, "base_url", "model"),
        ("grpo/agent_qwen2.5-3b.yaml", ("launch/serve_vllm.sh",), 0, "reranker_base_url", "reranker_model"),
        ("eval/igp_qwen2.5-7b_vllm.yaml", ("vllm", "serve"), 0, "base_url", "model"),
        ("eval/igp_qwen2.5-7b_vllm.yaml", ("r3forge", "serve", "llm"), 0, "base_url", "model"),
        ("rewrite/qream_ft_llama32_1b.yaml", ("launch/serve_vllm.sh",), 0, "base_url", "model"),
        ("rewrite/qream_ft_llama32_1b.yaml", ("launch/serve_vllm.sh",), 1, "reader_base_url", "reader_model"),
    ],
)
def test_servers_serve_what_the_config_sends(config, prefix, index, url, name):
    command = header_command(config, *prefix, index=index)
    spec, values = served_model(command, "-"), written(config)
    assert spec.name == values[name], (
        f"{config}: the header serves {spec.name!r}, the config sends {values[name]!r}"
    )
    assert port(command) == urlparse(values[url]).port, f"{config}: {url} vs the header's port"
    for key in ("top_logprobs", "probe_k"):  # a request for more logprobs than the server allows fails
        assert values.get(key, 0) <= spec.max_logprobs, f"{config}: {key} {values.get(key)} > --max-logprobs"


@pytest.mark.parametrize("config", [c for c in PAPER_CONFIGS if "retriever_url" in written(c)])
def test_retriever_server_port(config):
    assert (
        port(header_command(config, "r3forge", "serve", "retriever"))
        == urlparse(written(config)["retriever_url"]).port
    )


def test_chain_paths_meet():
    """What one header command or config writes is what the next one reads."""
    verbal, sft = "annotate/verbal_nq_gptoss120b.yaml", "sft/verbal_reranker_qwen2.5-1.5b.yaml"
    run = written(verbal)["output_dir"]
    shard = header_command(verbal, "r3forge", "annotate", "verbal")
    merge = header_command(verbal, "r3forge", "synth", "merge")
    assert Path(flag(shard, "--output_dir")).parent == Path(run)
    assert merge[merge.index("--inputs") + 1 : merge.index("--output_dir")] == [
        f"{run}/s{i}" for i in range(4)
    ]
    merged = flag(merge, "--output_dir")
    for size in ("1.5b", "3b"):
        config = f"sft/verbal_reranker_qwen2.5-{size}.yaml"
        judge = header_command(config, "r3forge", "annotate", "judge")
        export = header_command(config, "r3forge", "annotate", "export-sft")
        assert flag(judge, "--annotation_dir") == flag(export, "--input_dir") == merged
        assert flag(export, "--judge_dir") == flag(judge, "--output_dir")
        assert flag(export, "--output_dir") == written(config)["dataset"]
        assert flag(judge, "--model") == written(verbal)["model"]  # the header's one served model

    qream, qream_sft, rewrite = (
        "annotate/qream_llama3_8b.yaml",
        "sft/qream_ft_llama3.2-1b.yaml",
        "rewrite/qream_ft_llama32_1b.yaml",
    )
    assert written(qream_sft)["dataset"] == f"{written(qream)['output_dir']}/sft"
    student = f"{written(qream_sft)['output_dir']}/final"  # what the SFT recipe writes: weights + tokenizer
    assert written(rewrite)["model"] == student == header_command(rewrite, "launch/serve_vllm.sh")[1]
    assert written(rewrite)["tokenizer"] == student, f"{rewrite}: tokenizer must be a folder holding one"

    grpo = "grpo/agent_qwen2.5-3b.yaml"
    release = header_command(grpo, "r3forge", "export")
    assert flag(release, "--run") == written(sft)["output_dir"]
    assert (
        flag(release, "--out")
        == header_command(grpo, "launch/serve_vllm.sh")[1]
        == written(grpo)["reranker_tokenizer"]
    )
    closed_book = header_command(grpo, "r3forge", "data", "filter-closed-book")
    assert flag(closed_book, "--output") == written(grpo)["dataset"]
    assert flag(closed_book, "--model") == written(grpo)["model_name_or_path"]

    igp = "eval/igp_qwen2.5-7b_vllm.yaml"
    assert flag(header_command(igp, "r3forge", "index", "build"), "--output") == written(igp)["index"]


def on_cluster(cls: type, world: int) -> type:
    """`cls` (TRL's GRPOConfig / SFTConfig) computing as on `world` processes: TRL's own batch checks run."""
    return type(f"{cls.__name__}x{world}", (cls,), {"world_size": property(lambda self: world)})


def accelerate_processes(command: list[str]) -> int:
    return int(yaml.safe_load((REPO / flag(command, "--config_file")).read_text())["num_processes"])


def launches(config: str) -> list[tuple[int, list[str]]]:
    """(world size, extra flags) of each launch line in the header: accelerate (its config's num_processes)
    and sbatch over N nodes x GPUS_PER_NODE."""
    out = [(accelerate_processes(header_command(config, "accelerate", "launch")), [])]
    for command in header_commands(config):
        _, cmd = split_env(command)
        if cmd[0] == "sbatch" and "launch/sft_multinode_slurm.sh" in cmd:
            extra = cmd[cmd.index("--") + 1 :] if "--" in cmd else []
            out.append((int(flag(cmd, "--nodes")) * GPUS_PER_NODE, extra))
    return out


@pytest.mark.parametrize("config", ["sft/verbal_reranker_qwen2.5-1.5b.yaml", "sft/verbal_reranker_qwen2.5-3b.yaml",
                                    "sft/qream_ft_llama3.2-1b.yaml"])  # fmt: skip
def test_sft_batch_arithmetic_as_written(config):
    claim = re.search(r"global batch (\d+)", (CONFIGS / config).read_text())
    for world, extra in launches(config):
        classes = (*SFT_CONFIGS[:-1], on_cluster(SFTConfig, world))
        *_, training = parse_config(classes, ["--config", str(CONFIGS / config), "--bf16", "false", *extra])
        total = training.per_device_train_batch_size * training.gradient_accumulation_steps * world
        if claim:
            assert total == int(claim[1]), f"{config} on {world} GPUs {extra}: global batch {total}"
        assert training.warmup_steps < 1  # a ratio of the total steps


def test_grpo_batch_arithmetic_as_written():
    """640 rollouts = 128 questions x G per optimizer step, one generation per step, on 4 GPUs as written and
    on 8 (the 7B note: grad-accum 4; two nodes: the header's -- --gradient_accumulation_steps 4)."""
    config = "grpo/agent_qwen2.5-3b.yaml"
    cases = [*launches(config), (8, ["--gradient_accumulation_steps", "4"])]
    assert [w for w, _ in cases] == [4, 8, 8]
    for world, extra in cases:
        classes = (*GRPO_CONFIGS[:-1], on_cluster(GRPOConfig, world))
        argv = ["--config", str(CONFIGS / config), "--bf16", "false", *extra]
        *_, training = parse_config(classes, argv, defaults=PAPER_DEFAULTS)  # TRL's checks run here
        step = training.per_device_train_batch_size * training.gradient_accumulation_steps * world
        assert step == 640 and step // training.num_generations == 128, (world, extra, step)
        assert training.generation_batch_size == step, (
            f"{world} GPUs {extra}: generation {training.generation_batch_size}"
        )
        assert training.steps_per_generation == training.gradient_accumulation_steps
        assert training.generation_batch_size % training.num_generations == 0
