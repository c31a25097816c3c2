"""The `r3forge` console command: `r3forge <command> [<subcommand>] [--config file.yaml] [--flags]`.

Each command is a function `f(argv) -> int` in its own module, imported only when invoked, so
`r3forge --help` answers instantly without importing torch.
"""

from __future__ import annotations

import importlib
import sys

from r3forge import __version__
from r3forge.errors import R3ForgeError

# command -> ("module:function" taking argv, one-line description)
COMMANDS: dict[str, tuple[str, str]] = {
    "models": (
        "r3forge.models.cli:main",
        "Materialize, verify and chat with the embedded models (SmolLM2, MiniLM).",
    ),
    "data": ("r3forge.data.cli:main", "Load datasets into canonical records; generate the synthetic world."),
    "index": ("r3forge.retrieval.cli:main", "Build (BM25 or dense), inspect and search retrieval indexes."),
    "serve": (
        "r3forge.cli:serve",
        "Serve over HTTP: `serve llm` (vLLM OpenAI server), `serve retriever` (Search-R1 API).",
    ),
    "synth": (
        "r3forge.synth.cli:main",
        "Teacher data synthesis: run a step (sharded, resumable), merge shards, export/push.",
    ),
    "annotate": (
        "r3forge.annotate.cli:main",
        "Teacher annotation (verbal comment + 1-5 score) and its SFT export.",
    ),
    "sft": (
        "r3forge.sft.recipe:cli",
        "SFT distillation (verbal reranker, QREAM-FT): TRL SFTTrainer, full or LoRA, task metrics.",
    ),
    "grpo": (
        "r3forge.agent.grpo:cli",
        "GRPO of the search agent: multi-turn rollouts (search -> retriever -> verbal reranker), masked loss.",
    ),
    "train-cross-encoder": (
        "r3forge.rerank.train_cross:cli",
        "Train a cross-encoder reranker from the embedded MiniLM on HotpotQA-format gold passages.",
    ),
    "export": (
        "r3forge.release.cli:main",
        "SFT run folder -> release folder (weights, tokenizer, chat template, model card); optional Hub push.",
    ),
    "rewrite": (
        "r3forge.qream.apply:cli",
        "QREAM-ICL or a QREAM-FT checkpoint as a post-retrieval step; reader EM/F1/TK before and after.",
    ),
    "eval": (
        "r3forge.evalrag.cli:main",
        "Single-turn RAG evaluation: IGP, verbal reranker and baselines over Top-M / T_p sweeps; table + plots.",
    ),
    "quickstart": (
        "r3forge.quickstart.stages:cli",
        "The whole toolkit end to end on a CPU (annotate, distill, IGP, GRPO), resumable, with REPORT.md.",
    ),
    "demo": (
        "r3forge.demo:cli",
        "End-to-end foundation demo: models, synthetic world, closed-book vs gold-evidence QA.",
    ),
}

# `r3forge serve <target>` -> ("module:function" taking argv, one-line description)
SERVE_TARGETS: dict[str, tuple[str, str]] = {
    "llm": (
        "r3forge.backends.vllm_server:serve_main",
        "vLLM's OpenAI-compatible server: r3forge serve llm --model NAME [-- vllm flags].",
    ),
    "retriever": (
        "r3forge.retrieval.server:serve_main",
        "Search-R1-compatible /retrieve over a saved index.",
    ),
}


def subcommand_usage(command: str, subcommands: dict[str, str]) -> str:
    """The `r3forge <command> --help` text: usage line and one line per subcommand."""
    width = max(len(name) for name in subcommands)
    lines = [f"usage: r3forge {command} <subcommand> [--config file.yaml] [--flags]", "", "subcommands:"]
    return "\n".join(lines + [f"  {name:<{width}}  {desc}" for name, desc in subcommands.items()])


def usage() -> str:
    width = max(len(c) for c in COMMANDS)
    lines = [
        f"r3forge {__version__}: distillation and RL fine-tuning of the evidence path of RAG.",
        "",
        "usage: r3forge <command> [args] [--config file.yaml] [--<field> value ...]",
        "",
        "commands:",
    ]
    lines += [f"  {name:<{width}}  {desc}" for name, (_, desc) in COMMANDS.items()]
    lines += ["", "Run `r3forge <command> --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(__version__)
        return 0
    name = argv[0]
    if name not in COMMANDS:
        print(f"r3forge: unknown command '{name}'\n\n{usage()}", file=sys.stderr)
        return 2
    module_name, func = COMMANDS[name][0].split(":")
    command = getattr(importlib.import_module(module_name), func)
    try:
        return int(command(argv[1:]) or 0)
    except (R3ForgeError, FileNotFoundError) as e:
        print(f"r3forge {name}: error: {e}", file=sys.stderr)
        return 1


def serve(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SERVE_TARGETS:
        print(subcommand_usage("serve", {name: desc for name, (_, desc) in SERVE_TARGETS.items()}))
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    module_name, func = SERVE_TARGETS[argv[0]][0].split(":")
    return int(getattr(importlib.import_module(module_name), func)(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
