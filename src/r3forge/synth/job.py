"""A synthesis job's run settings, shared by every command that runs `prompt()` + `parse()` steps against a
model (`r3forge annotate verbal|judge|paraphrase`, `annotate qream`, `rewrite`, the judge probe): the output
folder, batching, `--shard i/N`, `--dry_run`, resume, and the claim of the folder before anything loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from r3forge.backends.open import LLMConfig
from r3forge.runfolder import check, claim, settings
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


def own_folder(kind: str, configs: Sequence[Any], scope: Sequence[str] = ()) -> None:
    """Claim the job's output folder for `kind` and its settings (`r3forge.runfolder`; `scope`: the fields that
    only choose how many items, so a rerun may take more) before anything loads: a folder of another job or of
    other settings is refused unless `--overwrite true`. A dry run only checks."""
    run = next(c for c in configs if isinstance(c, RunConfig))
    wanted = settings(configs, drop=scope)
    if not run.dry_run:
        claim(run.output_dir, kind, wanted, run.overwrite, legacy=(MANIFEST,))
    elif not run.overwrite:
        check(run.output_dir, kind, wanted, legacy=(MANIFEST,))
