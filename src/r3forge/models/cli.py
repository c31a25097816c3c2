"""`r3forge models prepare|verify|list|chat` (the table: `r3forge.cli`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from r3forge.config import parse_config
from r3forge.models.embedded import EMBEDDED_MODELS, models_root, prepare_model, verify_folder
from r3forge.models.locate import check_models, resolve_model


@dataclass
class PrepareConfig:
    models: list[str] = field(
        default_factory=lambda: list(EMBEDDED_MODELS),
        metadata={"help": f"Embedded models to materialize (default: all of {list(EMBEDDED_MODELS)})."},
    )
    force: bool = field(default=False, metadata={"help": "Rebuild even if a verified folder exists."})
    full_verify: bool = field(
        default=False,
        metadata={"help": "Re-hash every file of an existing folder instead of checking sizes."},
    )


@dataclass
class ChatConfig:
    prompt: str = field(metadata={"help": "The user message."})
    model: str = field(
        default="smollm2-135m-instruct",
        metadata={"help": "Embedded short name, local folder or Hub repo id.", "model": ()},
    )
    system: str | None = field(default=None, metadata={"help": "Optional system message."})
    max_new_tokens: int = field(default=20, metadata={"help": "Number of tokens to generate (greedy)."})


def chat(config: ChatConfig) -> str:
    """Greedy-decode one reply; returns the decoded text without special tokens."""
    path = resolve_model(config.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    messages = [{"role": "system", "content": config.system}] if config.system else []
    messages.append({"role": "user", "content": config.prompt})
    inputs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=config.max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def prepare(argv: list[str]) -> int:
    (cfg,) = parse_config((PrepareConfig,), argv, prog="r3forge models prepare")
    for name in cfg.models:
        start = time.perf_counter()
        path = prepare_model(name, force=cfg.force, full_verify=cfg.full_verify)
        print(f"{name}: {path} ({time.perf_counter() - start:.1f}s)")
    return 0


def verify(argv: list[str]) -> int:
    parse_config((), argv, prog="r3forge models verify")
    bad = 0
    for name in EMBEDDED_MODELS:
        folder = models_root() / name
        problems = verify_folder(folder, full=True) if folder.exists() else ["not materialized"]
        bad += bool(problems)
        print(f"{name}: {'ok' if not problems else '; '.join(problems)}")
    return 1 if bad else 0


def list_models(argv: list[str]) -> int:
    parse_config((), argv, prog="r3forge models list")
    for name, spec in EMBEDDED_MODELS.items():
        folder = models_root() / name
        state = "ready" if folder.exists() and not verify_folder(folder) else "not materialized"
        print(f"{name:<24} {spec.kind:<17} {state:<17} {spec.description}")
    return 0


def chat_main(argv: list[str]) -> int:
    (cfg,) = parse_config((ChatConfig,), argv, prog="r3forge models chat")
    check_models(cfg)
    print(chat(cfg))
    return 0
