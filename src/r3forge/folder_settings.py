"""Which config fields are a run folder's identity, per command: the one table `runfolder` claims folders by.

A command's settings are the fields of its configs but those that say where or how fast it runs (`RUNTIME`,
`runtime`); `IDENTITY` names, per command (the kind its owner.json records), what else is left out (what a rerun
extends in place), what a later run of the folder may change (`free`) and which runtime names count after all
(`keep`). `TRAINED_BY` lists the training arguments that decide a trained model (both training recipes).

An owner record of an older format reads as this version records it (`upgraded`): where a default moved from a
command's code into its config, an older record holds null for the value the command filled in after claiming.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FORMAT = "r3forge.owner/2"

# fields that say where or how fast a job runs, or hold a secret: never part of an owner's settings
RUNTIME = frozenset(
    {"output_dir", "output", "out", "overwrite", "resume", "resume_from_checkpoint", "dry_run", "progress"}
    | {"batch_size", "concurrency", "max_concurrency", "request_timeout_s", "shard", "device", "base_url"}
    | {"serve", "serve_max_model_len", "serve_log", "gpu_memory_utilization", "max_logprobs", "api_key"}
    | {"push_to_hub", "hub_endpoint", "hub_token", "hub_private"}
)
RUNTIME_SUFFIXES = ("_url", "_batch_size", "_serve", "_gpu_memory_utilization")


@dataclass(frozen=True)
class Identity:
    """Which config fields of a command are not its folder's identity, beyond `RUNTIME` (`IDENTITY`)."""

    leave_out: tuple[str, ...] = ()  # what the command extends in place or re-derives from its caches
    free: tuple[str, ...] = ()  # recorded in owner.json; a later run of the folder may change them
    keep: tuple[str, ...] = ()  # RUNTIME names that decide this command's output after all


# The training arguments (TrainingArguments / SFTConfig / GRPOConfig: hundreds of fields) that decide the trained
# model: a resume must keep them. The others may change between the runs of one folder: max_steps /
# num_train_epochs (a resume may extend them), logging, saving and evaluation cadence, dataloader,
# precision-of-kernels and distributed knobs. `training/run.py: claim_training` passes only these.
_TRAINED_BY = (
    "learning_rate lr_scheduler_type lr_scheduler_kwargs warmup_steps warmup_ratio weight_decay adam_beta1 "
    "adam_beta2 adam_epsilon optim optim_args max_grad_norm seed data_seed per_device_train_batch_size "
    "gradient_accumulation_steps bf16 fp16 label_smoothing_factor neftune_noise_alpha max_length packing "
    "packing_strategy padding_free completion_only_loss assistant_only_loss loss_type dataset_text_field "
    "truncation_mode chat_template_path shuffle_dataset beta epsilon epsilon_high delta num_generations "
    "num_iterations temperature top_p top_k min_p repetition_penalty max_completion_length "
    "importance_sampling_level mask_truncated_completions scale_rewards reward_weights steps_per_generation "
    "entropy_coef disable_dropout sync_ref_model ref_model_mixup_alpha ref_model_sync_steps"
)
TRAINED_BY = tuple(_TRAINED_BY.split())
# how many items an annotation takes: its records are per item, so a rerun may take more (the cache grows)
_ITEM_SCOPE = ("max_questions", "max_docs_per_question", "max_items")
# only how fast a training step runs or how much memory it takes (and training/cpu.py's CPUSettings)
_SPEED_ONLY = (
    "attn_implementation save_rollouts compact_cpu_lm_head cpu_lm_head_tile_tokens cpu_lm_head_tile_vocab "
    "bound_cpu_heap"
)
_TRAINING = Identity(
    leave_out=tuple(_SPEED_ONLY.split()),
    # what the held-out evaluation reads: the trained model is the same (the rows before a resume used the old)
    free=("max_eval_samples", "task_eval_samples", "task_eval_batch_size", "task_eval_at_start"),
)
_QREAM_SELECTION = (
    "fact_judge judge_tau lexical_threshold echo_guard selection validation_fraction orient_model"
)
# Every command that writes a folder, by the name its owner.json records, and what of its configs is not the
# folder's identity; every other field is (the one place that decides it; a command not listed: all fields).
IDENTITY: dict[str, Identity] = {
    "annotate verbal": Identity(leave_out=_ITEM_SCOPE),
    "annotate judge": Identity(leave_out=_ITEM_SCOPE),
    "annotate paraphrase": Identity(leave_out=_ITEM_SCOPE),
    # how it judges and selects its cached stages: a rerun re-thresholds the cached verdicts (a new tau) or adds
    # a stage folder (another fact judge) and rewrites the outputs; the question count is a setting (the
    # stylistic seeds are drawn from the questions left out)
    "annotate qream": Identity(leave_out=tuple(_QREAM_SELECTION.split())),
    # a sweep re-reads the saved scores: more questions, methods, Top-M or thresholds extend the run
    "eval rag": Identity(leave_out=("max_questions", "methods", "top_m", "thresholds")),
    "synth run": Identity(leave_out=("max_items", "export", "tokenizer")),
    "quickstart": Identity(leave_out=("run_dir", "fresh", "stop_after", "output_root")),
    "train-cross-encoder": Identity(keep=("batch_size",)),  # pairs per step: it shapes the model
    "sft": _TRAINING,
    "grpo": _TRAINING,
}


def runtime(key: str) -> bool:
    """Whether a config field only says where or how fast a job runs.

    >>> runtime("concurrency"), runtime("reranker_base_url"), runtime("temperature")
    (True, True, False)
    """
    return key in RUNTIME or key.endswith(RUNTIME_SUFFIXES)


# (format, kind, setting) -> the value a null there stood for: the command filled it in after its claim.
# owner/2: GRPO's reward_weights default [1, 0] moved from recipes/grpo.py into agent/config.py PAPER_DEFAULTS.
FILLED_LATER: dict[tuple[str, str, str], Any] = {
    ("r3forge.owner/1", "grpo", "reward_weights"): [1.0, 0.0],
}


def upgraded(owner: dict[str, Any]) -> dict[str, Any]:
    """The settings of an owner record (`format`, `kind`, `settings`) as this version records them.

    >>> upgraded({"format": "r3forge.owner/1", "kind": "grpo", "settings": {"reward_weights": None, "beta": 0.0}})
    {'reward_weights': [1.0, 0.0], 'beta': 0.0}
    >>> upgraded({"format": FORMAT, "kind": "grpo", "settings": {"reward_weights": None}})
    {'reward_weights': None}
    """
    settings = dict(owner["settings"])
    for (form, kind, key), value in FILLED_LATER.items():
        this_record = (owner.get("format"), owner.get("kind")) == (form, kind)
        if this_record and key in settings and settings[key] is None:
            settings[key] = value
    return settings
