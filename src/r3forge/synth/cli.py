"""`r3forge synth run|merge` (or `python -m r3forge.synth run|merge`): the synthesis engine's command line.

    r3forge synth run --step my.steps:OneWordAnswer --input questions.jsonl \\
        --output_dir runs/synth/s0 --shard 0/2 --backend openai --base_url http://node:8000/v1 \\
        --backend_model openai/gpt-oss-120b
    r3forge synth run ... --dry-run            # requests and prompt tokens, no generation
    r3forge synth merge --inputs runs/synth/s0 runs/synth/s1 --output_dir runs/synth/all \\
        --push-to-hub org/name

The step is `module:attr`: a step instance, or a class/factory called with `--step_args` (a JSON object).
`--backend` is hf, openai, vllm, or `module:attr` (a factory called without arguments). Every flag can also
come from `--config file.yaml`.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from r3forge.config import parse_config
from r3forge.data.jsonio import iter_json_records
from r3forge.data.loaders import load_corpus, load_qa
from r3forge.errors import ConfigError
from r3forge.identity import model_identity
from r3forge.runfolder import claim_command
from r3forge.synth.engine import EngineConfig, SynthesisStep, run_step
from r3forge.synth.export import HubConfig, merge_shards, push_from_config
from r3forge.synth.store import MANIFEST


@dataclass
class RunArgs:
    step: str = field(metadata={"help": "The step as module:attr (an instance, or a class/factory)."})
    input: str = field(metadata={"help": "Items: a JSON lines / JSON array file, or QA / corpus data."})
    input_kind: Literal["json", "qa", "corpus"] = field(
        default="json",
        metadata={"help": "json: raw dicts; qa / corpus: canonical records (r3forge loaders)."},
    )
    step_args: str = field(
        default="{}", metadata={"help": "JSON object of keyword arguments for the factory."}
    )
    backend: str = field(default="hf", metadata={"help": "hf, openai, vllm, or module:attr (a factory)."})
    backend_model: str = field(
        default="smollm2-135m-instruct",
        metadata={"help": "Backend model: embedded name, folder, Hub id.", "model": ("backend",)},
    )
    base_url: str = field(default="http://127.0.0.1:8000/v1", metadata={"help": "openai backend: API root."})
    device: str = field(default="cpu", metadata={"help": "hf backend: torch device."})
    overwrite: bool = field(
        default=False,
        metadata={"help": "Move a folder of another run (or of this one) aside to <folder>.replaced-<time>."},
    )


@dataclass
class MergeArgs:
    inputs: list[str] = field(metadata={"help": "Shard output folders to merge."})
    output_dir: str = field(metadata={"help": "New folder for the merged records, Parquet and card."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing merged folder."})


def _attr(spec: str, flag: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{flag}: expected module:attr, got {spec!r}")
    return getattr(importlib.import_module(module_name), attr)


def load_step(spec: str, kwargs: dict[str, Any]) -> SynthesisStep:
    """`module:attr` -> a step: the attribute itself, or what calling it with `kwargs` returns."""
    obj = _attr(spec, "--step")
    if isinstance(obj, type) or not all(hasattr(obj, a) for a in ("key", "prompt", "parse")):
        obj = obj(**kwargs)
    return obj


def load_items(args: RunArgs) -> Sequence[dict]:
    if args.input_kind == "qa":
        return load_qa(args.input)
    if args.input_kind == "corpus":
        return load_corpus(args.input)
    return [record for _, record in iter_json_records(Path(args.input))]


def open_backend(stack: ExitStack, args: RunArgs) -> Any:
    """The step's backend: a `module:attr` factory, or the model opened by `open_llm` (closed with `stack`)."""
    if ":" in args.backend:
        return _attr(args.backend, "--backend")()
    if args.backend not in ("hf", "openai", "vllm"):
        raise ConfigError(f"--backend: expected hf, openai, vllm or module:attr, got {args.backend!r}")
    # imported here: torch / transformers / openai (~10 s), which `merge` and dry runs do not need
    from r3forge.backends.open import LLMConfig, open_llm

    llm = LLMConfig(
        backend=args.backend, model=args.backend_model, base_url=args.base_url, device=args.device
    )  # type: ignore[arg-type]
    return stack.enter_context(open_llm(llm)).backend


def merge(argv: Sequence[str]) -> int:
    merge_args, hub = parse_config((MergeArgs, HubConfig), argv, prog="r3forge synth merge")
    out = merge_shards(merge_args.inputs, merge_args.output_dir, overwrite=merge_args.overwrite)
    push_from_config(out, hub)
    return 0


def run(argv: Sequence[str]) -> int:
    args, config, hub = parse_config((RunArgs, EngineConfig, HubConfig), argv, prog="r3forge synth run")
    claim_command(
        "synth run", config.output_dir, (args, config), args.overwrite, (MANIFEST,), dry_run=config.dry_run
    )
    step = load_step(args.step, json.loads(args.step_args))
    config.model = config.model or model_identity(args.backend_model, served=args.backend == "openai")
    if config.dry_run and not config.tokenizer and args.backend in ("hf", "vllm"):
        config.tokenizer = args.backend_model  # count prompt tokens without loading the model
    with ExitStack() as stack:
        backend = None if config.dry_run else open_backend(stack, args)
        summary = run_step(step, load_items(args), backend, config)
    if not config.dry_run:
        push_from_config(config.output_dir, hub)
    print(json.dumps(asdict(summary)))
    return 0
