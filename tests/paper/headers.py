"""The launch commands in a config's header comments, and the vLLM server one of them starts.

A paper YAML's header is its runbook: the servers to start first, then the `r3forge` command. The tier reads
the commands from there (so a header that drifts from the code fails a test) and starts each server the way
the header does, on loopback and with the embedded model behind the name the header serves:

    serve = header_command("eval/igp_qwen2.5-7b_vllm.yaml", "vllm", "serve")
    spec = served_model(serve, model=str(smollm2_path))   # name Qwen/Qwen2.5-7B-Instruct, K 128, flags kept
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
# a header command line: optional VAR=value assignments, then one of these programs
COMMAND = re.compile(
    r"^(?:[A-Z_]+=\S+\s+)*(?:r3forge|launch/\S+\.sh|vllm serve|accelerate launch|sbatch|hf)\s"
)
# vLLM flags that size the job to the cluster's GPUs: one CPU process here (tests/paper/README.md)
DEVICE_FLAGS = ("--tensor-parallel-size", "--data-parallel-size")
VLLM_MAX_LOGPROBS = 20  # vLLM's and launch/serve_vllm.sh's default --max-logprobs


def header_commands(config: str) -> list[list[str]]:
    """Every shell command in the header comments of `configs/<config>`, `\\` continuations joined, each
    shlex-split (trailing `# comments` dropped; leading `VAR=value` assignments kept as tokens)."""
    lines = [line[1:].strip() for line in (CONFIGS / config).read_text().splitlines() if line.startswith("#")]
    joined, buffer = [], ""
    for line in lines:
        buffer = f"{buffer} {line}".strip()
        if buffer.endswith("\\"):
            buffer = buffer[:-1]
            continue
        joined.append(buffer)
        buffer = ""
    commands = []
    for line in joined:
        if line.startswith("(or: ") and line.endswith(")"):
            line = line[len("(or: ") : -1]
        if COMMAND.match(line):
            commands.append(shlex.split(line, comments=True))
    return commands


def split_env(command: list[str]) -> tuple[dict[str, str], list[str]]:
    """({VAR: value} of the leading assignments, the command after them)."""
    env = {}
    while command and "=" in command[0] and not command[0].startswith("-"):
        key, value = command[0].split("=", 1)
        env[key], command = value, command[1:]
    return env, command


def header_command(config: str, *prefix: str, index: int = 0) -> list[str]:
    """The `index`-th header command of `config` whose tokens (after env assignments) start with `prefix`."""
    found = [c for c in header_commands(config) if split_env(c)[1][: len(prefix)] == list(prefix)]
    assert len(found) > index, (
        f"configs/{config}: no header command {index} starting with {' '.join(prefix)!r}"
    )
    return found[index]


def flag(command: list[str], name: str) -> str | None:
    """The value of `--name value` or `--name=value` in a command (the last one wins, as in argparse)."""
    value = None
    for i, token in enumerate(command):
        if token == name and i + 1 < len(command):
            value = command[i + 1]
        elif token.startswith(name + "="):
            value = token.split("=", 1)[1]
    return value


@dataclass(frozen=True)
class ServedModel:
    """A vLLM server as a header starts it: the name clients send, the model it loads, its flags."""

    name: str
    model: str
    max_logprobs: int
    max_model_len: int  # 0: the launcher's default (2048 on CPU builds)
    extra: tuple[str, ...]  # every other vLLM flag of the header, as written


def served_model(command: list[str], model: str) -> ServedModel:
    """The server of a header command (`launch/serve_vllm.sh MODEL ...`, `vllm serve MODEL ...` or
    `r3forge serve llm --model MODEL ... -- ...`) with `model` (a local folder) loaded behind the name the
    header serves. Host and port become loopback and a free port; DEVICE_FLAGS are dropped."""
    env, cmd = split_env(command)
    if cmd[0] == "launch/serve_vllm.sh":
        served, flags = cmd[1], cmd[2:]
        logprobs = int(env.get("MAX_LOGPROBS", VLLM_MAX_LOGPROBS))
    elif cmd[:2] == ["vllm", "serve"]:
        served, flags = cmd[2], cmd[3:]
        logprobs = VLLM_MAX_LOGPROBS
    elif cmd[:3] == ["r3forge", "serve", "llm"]:
        own = cmd[3 : cmd.index("--")] if "--" in cmd else cmd[3:]
        served = flag(own, "--served_model_name") or flag(own, "--model") or "smollm2-135m-instruct"
        logprobs = int(flag(own, "--max_logprobs") or VLLM_MAX_LOGPROBS)
        flags = cmd[cmd.index("--") + 1 :] if "--" in cmd else []
    else:
        raise AssertionError(f"not a vLLM server command: {shlex.join(command)}")
    served = flag(flags, "--served-model-name") or served
    logprobs = int(flag(flags, "--max-logprobs") or logprobs)
    max_len = int(flag(flags, "--max-model-len") or 0)
    extra, i = [], 0
    consumed = ("--port", "--host", "--served-model-name", "--max-logprobs", "--max-model-len", *DEVICE_FLAGS)
    while i < len(flags):
        token = flags[i]
        takes_value = i + 1 < len(flags) and not flags[i + 1].startswith("--")
        if token.split("=", 1)[0] in consumed:
            i += 1 if "=" in token else 2
            continue
        extra += flags[i : i + 2] if takes_value and "=" not in token else [token]
        i += 2 if takes_value and "=" not in token else 1
    return ServedModel(served, model, logprobs, max_len, tuple(extra))
