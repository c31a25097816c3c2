"""The model card (`README.md`) of a release: Hub metadata, what the model is, how it was trained, how to
load it.

The YAML front matter is what the Hub indexes (base model, datasets, library, pipeline, tags, license), so
it only names things the Hub can resolve: a base model or dataset given as a local path is listed in the
prose, not in the metadata. The prose is generated from the run's own records (config.yaml,
final_metrics.json, metrics.jsonl, run.json) so the card cannot drift from what was trained.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from huggingface_hub import try_to_load_from_cache

from r3forge import __version__
from r3forge.models.embedded import EMBEDDED_MODELS, models_root

if TYPE_CHECKING:
    from r3forge.release.export import RunInfo

TASK_DESCRIPTIONS = {
    "verbal": (
        "a **verbal reranker** (Verbal-R3): given a question and a retrieved document, it writes a short "
        "evidence-citing comment and a 1-5 relevance score, distilled from a teacher LLM's annotations"
    ),
    "qream": (
        "a **QREAM rewriter**: it rewrites a retrieved document into a question-oriented form that keeps "
        "the facts a reader needs to answer, distilled from golden teacher rewrites"
    ),
    "generic": "a chat model fine-tuned with supervised fine-tuning (SFT) on prompt/completion data",
}
# config.yaml fields shown first (when present); a config longer than SHORT_CONFIG fields is folded
KEY_FIELDS = (
    "model_name_or_path",
    "task",
    "dataset",
    "eval_dataset",
    "learning_rate",
    "lr_scheduler_type",
    "warmup_ratio",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_length",
    "packing",
    "completion_only_loss",
    "use_peft",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "bf16",
    "seed",
)
SHORT_CONFIG = 25
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_DATA_SUFFIXES = (".json", ".jsonl", ".parquet", ".csv", ".tsv", ".txt", ".arrow")
_LICENSE_LINE = re.compile(r"^\s*License:\s*([A-Za-z0-9][\w.+-]*?)\.?\s*$", re.MULTILINE | re.IGNORECASE)


def hub_id(name: str | None) -> str | None:
    """`name` if it reads as a Hub repo id (owner/name, not a local path or data file), else None.

    >>> hub_id("HuggingFaceTB/SmolLM2-135M-Instruct"), hub_id("data/train.jsonl"), hub_id("smollm2")
    ('HuggingFaceTB/SmolLM2-135M-Instruct', None, None)
    """
    if not name or not _REPO_ID.match(name) or name.lower().endswith(_DATA_SUFFIXES) or Path(name).exists():
        return None
    return name


def base_hub_id(run: RunInfo, adapter: bool = False) -> str | None:
    """The base model's Hub id: run.json's `base_model_id`, else `base_model` when it is one; for a full
    fine-tune of an embedded model, its upstream repo (lineage only: the embedded weights are dequantized from
    GGUF, so an adapter is not pointed at the upstream weights)."""
    base = run.meta["base_model"]
    known = run.meta.get("base_model_id") or hub_id(base)
    if known or adapter or base not in EMBEDDED_MODELS:
        return known
    return EMBEDDED_MODELS[base].hub_id or None


def default_license(run: RunInfo) -> str:
    """The base model's license when its model card is available offline, else `other`.

    Looked up, without network, in the base's local folder (a path or a materialized embedded model) or
    in the Hugging Face cache (a Hub id), from the card's `license:` metadata or a `License: X` line.
    """
    base = run.meta["base_model"]
    candidates = [Path(base) / "README.md"]
    if base in EMBEDDED_MODELS:
        candidates.append(models_root() / base / "README.md")
    for repo in filter(None, {base_hub_id(run), hub_id(base)}):
        cached = try_to_load_from_cache(repo, "README.md")
        if isinstance(cached, str):
            candidates.append(Path(cached))
    for path in candidates:
        if path.is_file() and (found := _license_of(path.read_text(encoding="utf-8", errors="replace"))):
            return found
    return "other"


def _license_of(card: str) -> str | None:
    if card.startswith("---"):
        try:
            meta = yaml.safe_load(card.split("---", 2)[1])
        except yaml.YAMLError:
            meta = None
        if isinstance(meta, dict) and isinstance(meta.get("license"), str):
            return meta["license"]
    match = _LICENSE_LINE.search(card)
    return match.group(1).lower() if match else None


def front_matter(run: RunInfo, license: str, adapter: bool) -> dict[str, Any]:
    """The card's Hub metadata."""
    meta: dict[str, Any] = {}
    if base := base_hub_id(run, adapter):
        meta["base_model"] = base
        meta["base_model_relation"] = "adapter" if adapter else "finetune"
    datasets = [d for d in run.meta.get("datasets") or [] if hub_id(d)]
    if datasets:
        meta["datasets"] = datasets
    meta["library_name"] = "peft" if adapter else "transformers"
    meta["pipeline_tag"] = "text-generation"
    tags = ["r3forge", run.meta["task"], "sft"] + (["lora"] if run.lora else [])
    meta["tags"] = tags + (["peft"] if adapter else [])
    meta["license"] = license
    return meta


def curve_summary(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """From metrics.jsonl: number of logged training steps, first/last loss, last step, and for each
    `eval_*` metric its number of evaluations, last value and the step of that value."""
    train = [m for m in metrics if "loss" in m]
    evals: dict[str, dict[str, Any]] = {}
    for record in metrics:
        for key, value in record.items():
            if key.startswith("eval_") and isinstance(value, int | float):
                entry = evals.setdefault(key, {"evaluations": 0})
                entry.update(evaluations=entry["evaluations"] + 1, last=value, step=record.get("step"))
    steps = [m["step"] for m in metrics if isinstance(m.get("step"), int | float)]
    return {
        "logged_steps": len(train),
        "last_step": max(steps) if steps else None,
        "first_loss": train[0]["loss"] if train else None,
        "last_loss": train[-1]["loss"] if train else None,
        "evals": evals,
    }


def model_card(run: RunInfo, license: str, repo_id: str | None, adapter_config: dict[str, Any] | None) -> str:
    """The release's README.md. `adapter_config` is given for an unmerged LoRA export (else None)."""
    adapter = adapter_config is not None
    meta = run.meta
    title = repo_id or run.path.name
    if not run.lora:
        kind = "full fine-tune"
    else:
        kind = "LoRA adapter, applied on top of the base model" if adapter else "LoRA, merged into the base"
    lines = [
        "---",
        yaml.safe_dump(front_matter(run, license, adapter), sort_keys=False, allow_unicode=True).strip(),
        "---",
        "",
        f"# {title}",
        "",
        f"This model is {TASK_DESCRIPTIONS[meta['task']]}. It was trained with r3forge's SFT recipe from "
        f"`{meta['base_model']}` ({kind}).",
        "",
        "## Model",
        "",
        *_table(("", ""), _model_rows(run, kind, license)),
        "",
        "## Training config",
        "",
        *_config_lines(run.config),
        "## Final metrics",
        "",
        *_table(("metric", "value"), [(f"`{k}`", _value(v)) for k, v in _flat(run.final_metrics).items()]),
        "",
        "## Training curve",
        "",
        *_curve_lines(curve_summary(run.metrics)),
        "## How to use",
        "",
        *_usage_lines(run, repo_id or "path/to/this/folder", adapter_config),
        "## Provenance",
        "",
        f"Trained from git commit `{meta.get('git_commit') or 'unknown'}` with r3forge "
        f"{meta.get('r3forge_version') or 'unknown'}; exported with r3forge {__version__}.",
        "",
    ]
    return "\n".join(lines)


def _config_lines(config: dict[str, Any]) -> list[str]:
    """The key hyperparameters, then every field of config.yaml; a TRL `SFTConfig` has ~200 fields, so
    long configs go into a collapsed block that keeps the card readable."""
    rows = [(f"`{k}`", _value(v)) for k, v in config.items()]
    if len(rows) <= SHORT_CONFIG:
        return [
            "The resolved training config (`config.yaml` of the run):",
            "",
            *_table(("field", "value"), rows),
            "",
        ]
    key = [(f"`{k}`", _value(config[k])) for k in KEY_FIELDS if k in config]
    return [
        "Key hyperparameters:",
        "",
        *_table(("field", "value"), key),
        "",
        "<details>",
        f"<summary>All {len(rows)} fields of the resolved training config (<code>config.yaml</code>)</summary>",
        "",
        *_table(("field", "value"), rows),
        "",
        "</details>",
        "",
    ]


def _flat(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested metrics (the SFT recipe's `task_before` / `task_after`) as dotted keys, one row each."""
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _model_rows(run: RunInfo, kind: str, license: str) -> list[tuple[str, str]]:
    meta = run.meta
    datasets = ", ".join(f"`{d}`" for d in meta.get("datasets") or []) or "-"
    return [
        ("task", f"`{meta['task']}`"),
        ("base model (as configured)", f"`{meta['base_model']}`"),
        ("base model (Hub)", f"`{base_hub_id(run)}`" if base_hub_id(run) else "-"),
        ("fine-tuning", kind),
        ("training data", datasets),
        ("started / finished", f"{meta.get('started') or '-'} / {meta.get('finished') or '-'}"),
        ("git commit", f"`{meta.get('git_commit') or 'unknown'}`"),
        ("r3forge version", str(meta.get("r3forge_version") or "unknown")),
        ("license", f"`{license}`"),
    ]


def _curve_lines(summary: dict[str, Any]) -> list[str]:
    if not summary["logged_steps"] and not summary["evals"]:
        return ["No metrics.jsonl was recorded for this run.", ""]
    lines = [
        f"{summary['logged_steps']} logged training steps (last step {_value(summary['last_step'])}); "
        f"training loss {_value(summary['first_loss'])} at the first log, "
        f"{_value(summary['last_loss'])} at the last.",
        "",
    ]
    if summary["evals"]:
        rows = [
            (f"`{k}`", str(v["evaluations"]), _value(v["last"]), _value(v["step"]))
            for k, v in summary["evals"].items()
        ]
        lines += [*_table(("eval metric", "evaluations", "last value", "at step"), rows), ""]
    return lines


def _usage_lines(run: RunInfo, repo: str, adapter_config: dict[str, Any] | None) -> list[str]:
    chat = [
        'messages = [{"role": "user", "content": "..."}]',
        "inputs = tokenizer.apply_chat_template(",
        '    messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"',
        ")",
        "out = model.generate(**inputs, max_new_tokens=256, do_sample=False)",
        'print(tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))',
    ]
    if adapter_config is None:
        return [
            "With transformers:",
            "",
            "```python",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            f'tokenizer = AutoTokenizer.from_pretrained("{repo}")',
            f'model = AutoModelForCausalLM.from_pretrained("{repo}")',
            *chat,
            "```",
            "",
            "With vLLM (OpenAI-compatible server; the chat template ships with the tokenizer):",
            "",
            "```bash",
            f"vllm serve {repo}",
            "```",
            "",
        ]
    base = adapter_config.get("base_model_name_or_path") or run.meta["base_model"]
    rank = int(adapter_config.get("r") or 8)
    rank_flag = f" --max-lora-rank {rank}" if rank > 16 else ""
    return [
        "With PEFT (downloads the base model named in `adapter_config.json`, then applies the adapter):",
        "",
        "```python",
        "from peft import AutoPeftModelForCausalLM",
        "from transformers import AutoTokenizer",
        "",
        f'tokenizer = AutoTokenizer.from_pretrained("{repo}")',
        f'model = AutoPeftModelForCausalLM.from_pretrained("{repo}")',
        *chat,
        "```",
        "",
        "With vLLM (the adapter served on top of the base model):",
        "",
        "```bash",
        f"vllm serve {base} --enable-lora --lora-modules {run.meta['task']}={repo}{rank_flag}",
        "```",
        "",
        "Or merge it first (`r3forge export --merge_lora`) to get a plain transformers / vLLM checkpoint.",
        "",
        *_local_base_note(base),
    ]


def _local_base_note(base: str) -> list[str]:
    """A warning when the adapter's base is not a Hub id: elsewhere, PEFT cannot find it."""
    if hub_id(base):
        return []
    return [
        f"Note: `adapter_config.json` names the base model `{base}`, which is not a Hub repo id (the run "
        "recorded no `base_model_id`); on another machine, set `base_model_name_or_path` there to the base "
        "model's location, or load the base yourself and use `PeftModel.from_pretrained(base, repo)`.",
        "",
    ]


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}"]
    return lines + [f"| {' | '.join(row)} |" for row in rows]


def _value(value: Any) -> str:
    """A config/metric value as one markdown table cell (numbers shortened, pipes escaped)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, bool | int | str):
        text = json.dumps(value) if isinstance(value, bool) else str(value)
    else:
        text = json.dumps(value, ensure_ascii=False, default=str)
    return text.replace("|", "\\|").replace("\n", " ")
