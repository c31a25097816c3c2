"""SFT distillation recipe: a student learns the teacher's completions (verbal reranker comments + scores,
QREAM golden rewrites) with TRL's `SFTTrainer`, completion-only loss, full fine-tuning or LoRA.

    r3forge sft --config configs/sft/verbal_reranker_cpu.yaml
    accelerate launch --config_file configs/accelerate/zero3.yaml -m r3forge.sft \\
        --config configs/sft/verbal_reranker_qwen2.5-3b.yaml
    torchrun --nproc_per_node 4 -m r3forge.sft --config ...      (recipes/sft.py runs the same main)

What the recipe fixes on top of TRL:
- data are prompt/completion chat rows; the prompt never contributes to the loss (completion_only_loss) and
  the chat template is the tokenizer's own, applied exactly as inference applies it (TRL tokenizes the
  prompt with add_generation_prompt=True, then the completion including its end-of-turn token, so the
  student learns to stop);
- bf16 on GPUs (TRL's default), fp32 on CPU (the CPU configs set `bf16: false`); `dtype: auto` loads the
  weights in the training precision; gradient checkpointing from the config;
- task metrics at every evaluation, before the first step and at the end (`taskeval.TaskEval`);
- the run folder of `run.py` (run.json, config.yaml, metrics.jsonl, final_metrics.json, final/), and each
  evaluation's per-row generations in task_eval/step_<N>.jsonl;
- `resume_from_checkpoint: auto` continues from the last checkpoint; a folder holding a run is refused;
- under a DeepSpeed accelerate config (configs/accelerate/zero*.yaml) a launch that DeepSpeed would stop
  later with a cryptic error is refused up front (`check_deepspeed_launch`), and run.json records how the
  run was distributed, read from the engine that ran (`distributed_info`).
"""

from __future__ import annotations

import os
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import datasets
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
from trl import ModelConfig, SFTConfig, SFTTrainer, get_peft_config

from r3forge.config import parse_config, save_config
from r3forge.errors import ConfigError
from r3forge.models import resolve_model
from r3forge.sft.config import SFT_CONFIGS, TASKS, SFTScriptArguments
from r3forge.sft.run import MetricsJSONL, prepare_output_dir, run_info, write_json
from r3forge.sft.taskeval import TaskEval, whole_questions

TASK_COLUMNS = {"verbal": ("question_id", "doc_id", "score"), "qream": ("question", "answers"), "generic": ()}


def load_split(path: str, split: str, limit: int | None) -> datasets.Dataset:
    """One split of a DatasetDict folder (or a whole .jsonl/.json file), checked for prompt/completion."""
    p = Path(path)
    if p.is_dir():
        data = datasets.load_from_disk(str(p))
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise ConfigError(f"{path}: no split {split!r} (splits: {sorted(data)})")
            data = data[split]
    elif p.suffix in (".jsonl", ".json") and p.is_file():
        data = datasets.Dataset.from_json(str(p))
    else:
        raise ConfigError(f"dataset {path}: neither a DatasetDict folder nor a .jsonl/.json file")
    missing = {"prompt", "completion"} - set(data.column_names)
    if missing:
        raise ConfigError(
            f"{path} ({split}): missing column(s) {sorted(missing)}; need prompt/completion chat rows"
        )
    return data.select(range(min(limit, len(data)))) if limit is not None else data


def model_dtype(model_args: ModelConfig, training: Any) -> torch.dtype:
    """`dtype: auto` (or unset): bf16 when training in bf16 on a GPU, else fp32."""
    if model_args.dtype and model_args.dtype != "auto":
        return getattr(torch, model_args.dtype)
    return torch.bfloat16 if training.bf16 and torch.cuda.is_available() else torch.float32


def load_model(model_args: ModelConfig, training: Any) -> tuple[str, Any, Any]:
    """(base name, model, tokenizer) of a training run: an embedded name (default SmolLM2), a local folder or
    a Hub id, in the training precision (`model_dtype`); the tokenizer pads with EOS when it has no pad."""
    base = model_args.model_name_or_path or "smollm2-135m-instruct"
    path = resolve_model(base)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=model_dtype(model_args, training),
                                                 attn_implementation=model_args.attn_implementation)  # fmt: skip
    return base, model, tokenizer


def check_deepspeed_launch(training: SFTConfig) -> None:
    """Under `accelerate launch --config_file configs/accelerate/zero*.yaml` (ACCELERATE_USE_DEEPSPEED), refuse
    before loading anything the two settings that stop a DeepSpeed run later with a cryptic error: a mixed
    precision of the launcher that the recipe's `bf16`/`fp16` do not match (DeepSpeed's config takes it from
    the launcher), and, without CUDA and with several processes, neither `use_cpu: true` nor
    `ddp_backend: gloo` (accelerate then counts one process and DeepSpeed stops on train_batch_size !=
    micro batch x accumulation x world size). On CPU DeepSpeed runs with `use_cpu: true` (gloo), `bf16: false`
    and `accelerate launch --mixed_precision no`."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() != "true":
        return
    cpu = "on CPU: accelerate launch --mixed_precision no ... --use_cpu true --bf16 false"
    launcher = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    recipe = "bf16" if training.bf16 else "fp16" if training.fp16 else "no"
    if launcher != recipe:
        raise ConfigError(
            f"accelerate launch --mixed_precision {launcher} (the accelerate config's mixed_precision) but the "
            f"SFT config trains in {recipe} (bf16: {training.bf16}, fp16: {training.fp16}): DeepSpeed would "
            f"refuse the mismatch; set both alike ({cpu})"
        )
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if (
        world > 1
        and not torch.cuda.is_available()
        and not training.use_cpu
        and training.ddp_backend != "gloo"
    ):
        raise ConfigError(
            f"{world} DeepSpeed processes without a CUDA device need use_cpu: true or ddp_backend: gloo "
            f"(ddp_backend is {training.ddp_backend}; accelerate would count one process) ({cpu})"
        )


def distributed_info(trainer: SFTTrainer) -> dict[str, Any]:
    """How the run was spread over processes (run.json's `distributed`): the accelerator's type, processes and
    backend, and under DeepSpeed what the engine ran (ZeRO stage, offload, batch arithmetic, optimizer)."""
    acc = trainer.accelerator
    info: dict[str, Any] = {"type": acc.distributed_type.value, "num_processes": acc.num_processes,
                            "backend": acc.state.backend, "device": str(acc.device)}  # fmt: skip
    engine = trainer.model_wrapped
    if trainer.is_deepspeed_enabled and hasattr(engine, "zero_optimization_stage"):
        # an offload config (or None); its device a plain string or a str enum, by DeepSpeed version
        offload = [getattr(o.device, "value", o.device) if o else "none"
                   for o in (engine.zero_offload_optimizer(), engine.zero_offload_param())]  # fmt: skip
        info["deepspeed"] = {
            "version": version("deepspeed"),
            "zero_stage": engine.zero_optimization_stage(),
            "offload_optimizer": offload[0],
            "offload_param": offload[1],
            "train_batch_size": engine.train_batch_size(),
            "train_micro_batch_size_per_gpu": engine.train_micro_batch_size_per_gpu(),
            "gradient_accumulation_steps": engine.gradient_accumulation_steps(),
            "optimizer": type(engine.basic_optimizer).__name__,
        }
    return info


def main(script: SFTScriptArguments, model_args: ModelConfig, training: SFTConfig) -> dict[str, Any]:
    """Train, evaluate, save `final/` and the run files; returns the final metrics."""
    if script.task not in TASKS:
        raise ConfigError(f"task must be one of {TASKS}, got {script.task!r}")
    resume = prepare_output_dir(training.output_dir, training.resume_from_checkpoint, script.overwrite)
    out = Path(training.output_dir)
    check_deepspeed_launch(training)
    set_seed(training.seed)

    # data: prompt/completion chat rows; the held-out split feeds both eval loss and task metrics
    train = load_split(script.dataset, script.train_split, script.max_train_samples)
    held = None
    if script.eval_dataset or script.eval_split:
        source = script.eval_dataset or script.dataset
        if script.eval_dataset or Path(source).is_dir():
            held = load_split(source, script.eval_split or "validation", script.max_eval_samples)
    missing = set(TASK_COLUMNS[script.task]) - set((held or train).column_names)
    if missing:
        raise ConfigError(f"{script.dataset}: task {script.task} needs column(s) {sorted(missing)}")

    # model: an embedded name, a local folder or a Hub id; LoRA when use_peft
    base, model, tokenizer = load_model(model_args, training)
    training.completion_only_loss = (
        True if training.completion_only_loss is None else training.completion_only_loss
    )
    trainer = SFTTrainer(model=model, args=training, train_dataset=train, eval_dataset=held,
                         processing_class=tokenizer, peft_config=get_peft_config(model_args))  # fmt: skip

    if trainer.is_world_process_zero():
        out.mkdir(parents=True, exist_ok=True)
        save_config((script, model_args, training), out / "config.yaml")
        info = run_info("sft", script.task, base, [script.dataset, *([script.eval_dataset] * bool(script.eval_dataset))],
                        bool(model_args.use_peft))  # fmt: skip
        write_json(out / "run.json", info)
    trainer.add_callback(MetricsJSONL(out / "metrics.jsonl"))
    task_eval = None
    if script.task != "generic" and held is not None and script.task_eval_samples > 0:
        rows = whole_questions(list(held), script.task_eval_samples)
        task_eval = TaskEval(trainer, rows, script.task, script.task_eval_max_new_tokens,
                             script.task_eval_batch_size, (script.reader_model, script.reader_few_shot),
                             out / "task_eval")  # fmt: skip
        task_eval.at_start = script.task_eval_at_start and resume is None
        trainer.add_callback(task_eval)

    result = trainer.train(resume_from_checkpoint=resume)
    metrics: dict[str, Any] = dict(result.metrics)
    if held is not None:
        step = trainer.state.global_step
        done = [row for row in trainer.state.log_history if "eval_loss" in row and row.get("step") == step]
        # the Trainer may have evaluated at the last step already (eval_strategy): do not pay for it twice
        metrics |= done[-1] if done else trainer.evaluate()
    trainer.save_model(str(out / "final"))
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(str(out / "final"))
        if task_eval is not None and task_eval.history:
            metrics["task_before"] = task_eval.history[0] if task_eval.at_start else None
            metrics["task_after"] = task_eval.history[-1]
        write_json(out / "final_metrics.json", metrics)
        finished = {
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "distributed": distributed_info(trainer),
        }
        write_json(out / "run.json", info | finished)
    return metrics


def cli(argv: list[str] | None = None) -> int:
    main(*parse_config(SFT_CONFIGS, sys.argv[1:] if argv is None else argv, prog="r3forge sft"))
    return 0
