"""A synthesis job's run settings, shared by every command that runs `prompt()` + `parse()` steps against a
model (`r3forge annotate verbal|judge|paraphrase`, `annotate qream`, `rewrite`, the judge probe): the output
folder, batching, `--shard i/N`, `--dry_run`, resume; `claim_job` claims the folder (`runfolder.claim_command`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from r3forge.backends.open import LLMConfig
from r3forge.runfolder import claim_command
from r3forge.synth.engine import EngineConfig
from r3forge.synth.store import MANIFEST


@dataclass
class RunConfig:
    output_dir: str = field(metadata={"help": "Synthesis output folder (resumable; one per job/shard)."})
    batch_size: int = field(default=16, metadata={"help": "Items per backend call (fsync'd per call)."})
    concurrency: int = field(default=1, metadata={"help": "Backend calls in flight (HTTP: 4-64)."})
    shard: str = field(default="0/1", metadata={"help": "'i/N': only shard i of N (merge: synth merge)."})
    dry_run: bool = field(
        default=False, metadata={"help": "Print request and prompt-token counts; no teacher calls."}
    )
    resume: bool = field(
        default=True, metadata={"help": "Skip cached items; false: refuse a non-empty folder."}
    )
    progress: bool = field(default=True, metadata={"help": "Live progress bar (stderr)."})
    overwrite: bool = field(
        default=False,
        metadata={"help": "Move a folder of another run (or of this one) aside to <folder>.replaced-<time>."},
    )


def engine_config(run: RunConfig, teacher: LLMConfig, model_id: str) -> EngineConfig:
    """The engine settings of a job whose one model is `teacher` (`model_id`: its cache identity)."""
    tokenizer = teacher.tokenizer or (teacher.model if teacher.backend in ("hf", "vllm") else "")
    return EngineConfig(
        output_dir=run.output_dir,
        model=model_id,
        batch_size=run.batch_size,
        concurrency=run.concurrency,
        shard=run.shard,
        dry_run=run.dry_run,
        resume=run.resume,
        progress=run.progress,
        tokenizer=tokenizer,  # dry runs count prompt tokens with it
    )


def claim_job(command: str, run: RunConfig, configs: Sequence[Any]) -> None:
    """Claim `run.output_dir` for the synthesis job `command` with the settings of `configs` (a dry run only
    checks); a folder of its caches without owner.json (their `MANIFEST`) is adopted."""
    claim_command(command, run.output_dir, configs, run.overwrite, (MANIFEST,), dry_run=run.dry_run)
