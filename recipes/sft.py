"""SFT distillation recipe: a student learns the teacher's completions (verbal reranker comments + scores,
QREAM golden rewrites) with TRL's `SFTTrainer`, completion-only loss, full fine-tuning or LoRA.

    python recipes/sft.py --config configs/sft/verbal_reranker_cpu.yaml
    accelerate launch --config_file configs/accelerate/zero3.yaml recipes/sft.py \\
        --config configs/sft/verbal_reranker_qwen2.5-3b.yaml

The same `main` runs as `r3forge sft --config ...`, `accelerate launch -m r3forge.sft ...` and
`torchrun -m r3forge.sft ...` (this file is installed as `r3forge.recipes.sft`). To fork the recipe, copy this
file and edit it; the parts it calls are in `r3forge.sft` (`train`, `run`, `taskeval`, `config`).

What the recipe fixes on top of TRL:
- data are prompt/completion chat rows; the prompt never contributes to the loss (completion_only_loss) and
  the chat template is the tokenizer's own, applied exactly as inference applies it (TRL tokenizes the
  prompt with add_generation_prompt=True, then the completion including its end-of-turn token, so the
  student learns to stop);
- `bf16: auto` (the CPU configs' setting): bf16 where the hardware computes it (a GPU with bf16, a CPU with
  bf16 units), fp32 elsewhere (`r3forge.precision`); run.json's "precision" says what it resolved to and
  why; `dtype: auto` loads the weights in the training precision; gradient checkpointing from the config;
- task metrics at every evaluation, before the first step and at the end (`taskeval.TaskEval`);
- the run folder of `training/run.py` (run.json, config.yaml, metrics.jsonl, final_metrics.json, final/), and each
  evaluation's per-row generations in task_eval/step_<N>.jsonl;
- `resume_from_checkpoint: auto` continues from the last complete checkpoint (one cut short by a kill is
  moved aside) and rolls metrics.jsonl back to it; a folder holding a run is refused;
- under a DeepSpeed accelerate config (configs/accelerate/zero*.yaml) a launch that DeepSpeed would stop
  later with a cryptic error is refused up front (`check_deepspeed_launch`), and run.json records how the
  run was distributed, read from the engine that ran (`distributed_info`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from transformers import set_seed
from trl import ModelConfig, SFTConfig, SFTTrainer, get_peft_config

from r3forge.config import parse_config, save_config
from r3forge.data.jsonio import write_json
from r3forge.errors import ConfigError
from r3forge.models import check_models
from r3forge.runfolder import claim_command
from r3forge.sft.config import SFT_CONFIGS, TASKS, SFTScriptArguments
from r3forge.sft.taskeval import TaskEval, whole_questions
from r3forge.sft.train import TASK_COLUMNS, check_deepspeed_launch, distributed_info, load_split
from r3forge.training.cpu import apply_cpu_settings
from r3forge.training.model import load_model
from r3forge.training.run import (
    RUN_FILES,
    MetricsJSONL,
    precision_info,
    precision_line,
    prepare_output_dir,
    run_info,
    trained_by,
)


def main(script: SFTScriptArguments, model_args: ModelConfig, training: SFTConfig) -> dict[str, Any]:
    """Train, evaluate, save `final/` and the run files; returns the final metrics."""
    if script.task not in TASKS:
        raise ConfigError(f"task must be one of {TASKS}, got {script.task!r}")
    configs = (script, model_args, trained_by(training))
    claim_command("sft", training.output_dir, configs, script.overwrite, RUN_FILES)  # before anything loads
    resume = prepare_output_dir(
        training.output_dir, training.resume_from_checkpoint, script.overwrite, training.save_only_model
    )
    out = Path(training.output_dir)
    check_deepspeed_launch(training)
    apply_cpu_settings(script)  # CPU: the LM head on completion tokens in small tiles; optionally the heap
    set_seed(training.seed)

    # data: prompt/completion chat rows; the held-out split feeds both eval loss and task metrics
    train = load_split(script.dataset, script.train_split, script.max_train_samples)
    held = None
    if script.eval_dataset or script.eval_split:
        source = script.eval_dataset or script.dataset
        if not script.eval_dataset and script.eval_split == script.train_split:
            raise ConfigError(
                f"eval_split {script.eval_split!r} of dataset {script.dataset} is the training split: the "
                "held-out metrics would score training rows; set eval_dataset (the same folder to score "
                "training rows on purpose), another eval_split, or eval_split: '' (no evaluation)"
            )
        if script.eval_dataset or Path(source).is_dir():
            held = load_split(source, script.eval_split or "validation", script.max_eval_samples)
    missing = set(TASK_COLUMNS[script.task]) - set((held or train).column_names)
    if missing:
        raise ConfigError(f"{script.dataset}: task {script.task} needs column(s) {sorted(missing)}")

    # model: an embedded name, a local folder or a Hub id; LoRA when use_peft
    base, model, tokenizer = load_model(model_args, training)
    data_paths = [script.dataset, *([script.eval_dataset] * bool(script.eval_dataset))]
    info = run_info("sft", script.task, base, data_paths, bool(model_args.use_peft))
    info["precision"] = precision_info(training)
    training.completion_only_loss = (
        True if training.completion_only_loss is None else training.completion_only_loss
    )
    trainer = SFTTrainer(
        model=model,
        args=training,
        train_dataset=train,
        eval_dataset=held,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )

    if trainer.is_world_process_zero():
        out.mkdir(parents=True, exist_ok=True)
        save_config((script, model_args, training), out / "config.yaml")
        print(precision_line(info["precision"]), flush=True)
        write_json(out / "run.json", info)
    trainer.add_callback(MetricsJSONL(out / "metrics.jsonl"))
    task_eval = None
    if script.task != "generic" and held is not None and script.task_eval_samples > 0:
        rows = whole_questions(list(held), script.task_eval_samples)
        task_eval = TaskEval(
            trainer,
            rows,
            script.task,
            script.task_eval_max_new_tokens,
            script.task_eval_batch_size,
            (script.reader_model, script.reader_few_shot),
            out / "task_eval",
        )
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
    """`r3forge sft`, `python -m r3forge.sft`, `python recipes/sft.py`: parse the configs, run `main`."""
    configs = parse_config(SFT_CONFIGS, sys.argv[1:] if argv is None else argv, prog="r3forge sft")
    check_models(*configs)  # before anything loads, as every dataset path (`load_split`)
    main(*configs)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
