"""The quickstart's REPORT.md: every number read from the files the stages wrote (nothing typed in here).

<run>/REPORT.md          tables, links to the plots, the resolved configs, timings, next commands
<run>/grpo_reward.png    GRPO reward (answer + format) per step
<run>/rag/pareto_*.png   single-turn RAG: F1 vs input tokens per method (written by `eval rag`)
"""

from __future__ import annotations

import json
import os
import platform
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from matplotlib.ticker import MaxNLocator

from r3forge import __version__
from r3forge.annotate.report import agreement, annotation_report
from r3forge.data.jsonio import read_jsonl

AGENT_COLUMNS = (
    ("em", "EM"),
    ("f1", "F1"),
    ("format_ok", "format ok"),
    ("searches_per_question", "searches / q"),
    ("ra_r", "RA-R"),
    ("cue_r", "CUE-R"),
    ("reward", "reward"),
)
PAPER_SCALE = (
    (
        "Teacher annotation (GPT-OSS-120B on vLLM)",
        "r3forge annotate verbal --config configs/annotate/verbal_nq_gptoss120b.yaml",
    ),
    (
        "Verbal reranker student, Qwen2.5-1.5B (ZeRO-3)",
        "accelerate launch --config_file configs/accelerate/zero3.yaml -m r3forge.sft "
        "--config configs/sft/verbal_reranker_qwen2.5-1.5b.yaml",
    ),
    (
        "Verbal reranker student, Qwen2.5-3B, 2 nodes (SLURM)",
        "sbatch --nodes=2 launch/sft_multinode_slurm.sh configs/sft/verbal_reranker_qwen2.5-3b.yaml",
    ),
    (
        "QREAM rewriting (Llama-3-8B teacher)",
        "r3forge annotate qream --config configs/annotate/qream_llama3_8b.yaml",
    ),
    ("QREAM-FT student, Llama-3.2-1B", "r3forge sft --config configs/sft/qream_ft_llama3.2-1b.yaml"),
    ("IGP with Qwen2.5-7B on vLLM", "r3forge eval rag --config configs/eval/igp_qwen2.5-7b_vllm.yaml"),
    (
        "GRPO search agent, Qwen2.5-3B (ZeRO-3, vLLM colocate)",
        "accelerate launch --config_file configs/accelerate/zero3.yaml -m r3forge.agent.grpo "
        "--config configs/grpo/agent_qwen2.5-3b.yaml",
    ),
)


def read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]


def stages_section(stages: Sequence[Any], state: dict[str, Any]) -> list[str]:
    rows, total = [], 0.0
    for i, stage in enumerate(stages, 1):
        rec = state["stages"].get(stage.name, {})
        seconds = rec.get("seconds")
        total += seconds or 0.0
        rows.append(
            (
                i,
                f"`{stage.name}`",
                stage.title,
                f"{seconds:.0f}" if seconds is not None else "-",
                rec.get("attempts", "-"),
                gib_cell(rec.get("peak_rss_gib")),
                gib_cell(rec.get("peak_tree_rss_gib")),
            )
        )
    header = ("#", "stage", "what", "seconds", "attempts", "peak RSS GiB", "peak tree RSS GiB")
    lines = ["## Stages", "", *table(header, rows)]
    lines += [
        "",
        f"Total stage time: {total / 60:.1f} min (the report stage counts as it is written). "
        "Each stage's command line and full output are in `logs/<stage>.log`.",
        "",
        "Memory: *peak RSS* is the largest resident size any one process of the stage reached (the "
        "kernel's high-water mark, read every 0.5 s); *peak tree RSS* the largest sum over the stage's "
        "processes (sampled every 0.5 s). The vLLM servers the quickstart runs beside the stages are not in "
        "either.",
    ]
    servers = state.get("server_peak_rss_gib") or {}
    if servers:
        lines.append(
            "vLLM servers (sum of each server's processes' high-water marks, read when it stopped): "
            + ", ".join(f"{role} {value:.2f} GiB" for role, value in sorted(servers.items()))
            + "."
        )
    return lines


def gib_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def annotation_section(run: Path, teacher: str, labels: str = "model") -> list[str]:
    if not (run / "annotate").is_dir():
        return []
    rep = annotation_report(str(run / "annotate"))
    lines = [
        "## 1. Teacher annotation (verbal triplets)",
        "",
        f"Teacher `{teacher}` behind a vLLM OpenAI server on loopback, the reranker world's questions with "
        "their own graded passages. `ndcg@k` ranks by its argmax score (ties: the score token's logprob), "
        "`expected_ndcg@k` by its expected score from the five digit logprobs.",
        "",
        f"- pairs annotated {rep['pairs_annotated']}, accepted {rep['pairs_accepted']} "
        f"({fmt(rep['acceptance_rate'])})",
        f"- reject reasons: {json.dumps(rep['reject_reasons'])}",
        f"- score distribution (1-5): {json.dumps(rep['score_distribution'])}",
    ]
    extra = {
        k: v
        for k, v in rep.items()
        if k
        not in (
            "folder",
            "pairs_annotated",
            "pairs_accepted",
            "acceptance_rate",
            "reject_reasons",
            "score_distribution",
            "counts",
        )
    }
    lines += [f"- {k}: {json.dumps(v) if isinstance(v, dict) else fmt(v)}" for k, v in extra.items()]
    used = [s for s, n in (rep["score_distribution"] or {}).items() if n]
    if len(used) == 1:
        lines += [
            "",
            f"The teacher gave every accepted pair the same score ({used[0]}): its argmax carries no "
            "ranking signal (compare `expected_ndcg@3` with `input_order_ndcg@3` above for what its digit "
            "probabilities carry). That is the 135M teacher, not the pipeline: point `--teacher_model` "
            "at a larger model (recipes/README.md, *Bring your own*) for informative scores.",
        ]
    if labels == "rules":
        lines += [
            "",
            "**Who labelled the student's data:** the rule teacher over the reranker world's gold "
            "relevance (`r3forge annotate rules`: 5 = the gold passage with the answer, 4 = a bridge "
            "passage, 3 = a distractor naming the answer, 2 = a distractor sharing half the question's "
            "words, 1 = otherwise; each comment cites the passage's evidence sentence), not the model "
            "above, whose scores would teach a constant. `--reranker_teacher model` trains on the "
            "model's annotations instead.",
        ]
    return lines


def heldout_rankings(task_eval: Path) -> dict[str, dict[str, float]]:
    """NDCG@k of the input order and of the teacher's labels on the held-out pairs the student was evaluated
    on (the last per-row file in an SFT run's `task_eval/`), so the student's figures have their references
    beside them."""
    files = sorted(task_eval.glob("step_*.jsonl"))
    if not files:
        return {}
    rows = [r | {"rank": i, "score": r["teacher_score"]} for i, r in enumerate(read_jsonl(files[-1]))]
    rep = agreement(rows, k_values=(1, 3, 5))
    shuffled = [
        agreement(
            [
                r | {"rank": j}
                for r, j in zip(rows, random.Random(seed).sample(range(len(rows)), len(rows)), strict=True)
            ],
            k_values=(1, 3, 5),
        )
        for seed in range(100)
    ]
    return {
        "input order": {f"ndcg@{k}": rep.get(f"input_order_ndcg@{k}") for k in (1, 3, 5)},
        "random order (mean of 100 shuffles)": {
            f"ndcg@{k}": sum(s[f"input_order_ndcg@{k}"] for s in shuffled) / len(shuffled) for k in (1, 3, 5)
        },
        "teacher (its SFT labels)": {f"ndcg@{k}": rep.get(f"ndcg@{k}") for k in (1, 3, 5)},
    }


def student_section(run: Path) -> list[str]:
    metrics = read_json(run / "reranker-sft" / "final_metrics.json")
    if metrics is None:
        return []
    before, after = metrics.get("task_before") or {}, metrics.get("task_after") or {}
    keys = [
        k for k in after if isinstance(after[k], (int, float)) and not k.endswith(("runtime", "per_second"))
    ]
    lines = [
        "## 2. Verbal reranker student (SFT distillation)",
        "",
        f"Train loss {fmt(metrics.get('train_loss'))}, eval loss {fmt(metrics.get('eval_loss'))}. "
        "Task metrics on held-out pairs (questions the student never saw; it generates comment + score):",
        "",
    ]
    lines += table(("metric", "before SFT", "after SFT"), [(k, before.get(k), after.get(k)) for k in keys])
    if after.get("eval_task_quote_faithfulness") is not None:
        lines += [
            "",
            f"Quote faithfulness {fmt(after['eval_task_quote_faithfulness'])}: the share of the spans its "
            "comments quote that the passage holds verbatim (quote rate "
            f"{fmt(after.get('eval_task_quote_rate'))}: the comments that quote at all). Whether its comments "
            "keep the answer where the agent reads them: RA-R in section 4.",
        ]
    refs = heldout_rankings(run / "reranker-sft" / "task_eval")
    if refs:
        rows = [(name, m["ndcg@1"], m["ndcg@3"], m["ndcg@5"]) for name, m in refs.items()]
        for name, m in (("student before SFT", before), ("student after SFT", after)):
            rows.append((name, *(m.get(f"eval_task_ndcg@{k}") for k in (1, 3, 5))))
            if m.get("eval_task_expected_ndcg@3") is not None:
                rows.append((f"{name}, E[s]", *(m.get(f"eval_task_expected_ndcg@{k}") for k in (1, 3, 5))))
        lines += [
            "",
            "The same held-out pairs, ranked (NDCG@k against the world's graded relevance):",
            "",
            *table(("ranking", "NDCG@1", "NDCG@3", "NDCG@5"), rows),
        ]
    return [
        *lines,
        "",
        "Release folder (what vLLM serves below and `r3forge export --push` uploads): `reranker/`.",
    ]


def rag_section(run: Path) -> list[str]:
    rag = run / "rag"
    if not (rag / "table.md").is_file():
        return []
    # table.md without its own "# RAG evaluation" title (this section has one)
    lines = [
        "## 3. Single-turn RAG: retrieval only vs verbal reranker vs IGP",
        "",
        "The generator answers from the Top-M passages each method keeps (`none`: the retriever's order; "
        "`verbal`: the distilled student's scores; `igp`: information-gain pruning at threshold T_p).",
        "",
        "\n".join(
            line
            for line in (rag / "table.md").read_text(encoding="utf-8").splitlines()
            if not line.startswith("# ")
        ).strip(),
        "",
    ]
    lines += [f"![{p.stem}](rag/{p.name})" for p in sorted(rag.glob("pareto_*.png"))]
    return lines


def reward_plot(metrics: list[dict[str, Any]], path: Path) -> Path | None:
    steps = [m for m in metrics if "reward" in m]
    if not steps:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot([m["step"] for m in steps], [m["reward"] for m in steps], marker="o", label="reward (answer)")
    fmt_key = next((k for k in steps[0] if "format_reward" in k and k.endswith("mean")), None)
    if fmt_key:
        ax.plot([m["step"] for m in steps], [m[fmt_key] for m in steps], marker=".", label="format reward")
    ax.set_xlabel("GRPO step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("mean over rollouts")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)
    return path


def agent_section(run: Path) -> list[str]:
    before = read_json(run / "agent" / "before" / "summary.json")
    after = read_json(run / "agent" / "after" / "summary.json")
    final = read_json(run / "grpo" / "final_metrics.json")
    if not (before or after or final):
        return []
    lines = [
        "## 4. Search agent: GRPO with the student reranker in the loop",
        "",
        "Multi-turn rollouts `<search>` -> BM25 -> verbal student (vLLM) -> `<information>` -> ... -> "
        "`<answer>`, greedy, on held-out world questions (the 20% GRPO never trains on).",
        "",
    ]
    rows = [
        (name, *[(s or {}).get(k) for k, _ in AGENT_COLUMNS])
        for name, s in (("warm start (before GRPO)", before), ("after GRPO", after))
        if s
    ]
    lines += table(("checkpoint", *[title for _, title in AGENT_COLUMNS]), rows)
    if before and after and all(before.get(k) == after.get(k) for k, _ in AGENT_COLUMNS):
        lines += [
            "",
            "Before and after agree on every column: a few CPU steps at this learning rate do not move "
            "greedy decoding. The 32-step CPU recipe (`r3forge grpo --config "
            "configs/grpo/agent_world_cpu.yaml`, about 26 min on 2 cores) is the longer run.",
        ]
    metrics = read_jsonl(run / "grpo" / "metrics.jsonl")
    masked = [m["agent/masked_fraction"] for m in metrics if "agent/masked_fraction" in m]
    if final:
        env = final.get("env") or {}
        window = final.get("reward_window", "-")
        steps = "step" if window == 1 else f"{window} steps"
        lines += [
            "",
            f"GRPO: {final.get('logged_steps', '-')} steps; mean reward of the first {steps} "
            f"{fmt(final.get('reward_first'))}, of the last {fmt(final.get('reward_last'))}; masked "
            "(non-policy) completion tokens "
            f"{fmt(sum(masked) / len(masked) if masked else None)} on average.",
        ]
        if env.get("reranker_pairs_requested"):
            saved = 1 - env["reranker_pairs"] / env["reranker_pairs_requested"]
            lines.append(
                f"Query de-duplication: {env['queries']} queries, {env['unique_queries']} unique; "
                f"reranker pairs {env['reranker_pairs_requested']} requested -> {env['reranker_pairs']} "
                f"judged ({saved:.0%} saved)."
            )
    if (plot := reward_plot(metrics, run / "grpo_reward.png")) is not None:
        lines += ["", f"![GRPO reward per step]({plot.name})"]
    return lines


def precision_lines(state: dict[str, Any], stages: Sequence[Any]) -> list[str]:
    """The machine and each training stage's precision, as its run.json recorded it (`bf16: auto` resolved)."""
    machine = state.get("machine") or {}
    lines = [
        f"Machine: {machine.get('cores', '?')} cores; {machine.get('why', 'CPU not recorded')}. Training "
        "precision (`bf16: auto` resolves per machine; run.json of each training stage):"
    ]
    for stage in stages:
        info = (read_json(Path(stage.output) / "run.json") or {}).get("precision") if stage.output else None
        if info:
            lines.append(
                f"- `{stage.name}` trained in **{info['mixed_precision']}** on {info['device']} "
                f"(bf16 set by {info['set_by']})"
            )
    return lines


def configs_section(run: Path, stages: Sequence[Any]) -> list[str]:
    lines = [
        "## Resolved configs",
        "",
        "Every field of every job as it ran (`--config` reads each back).",
        "",
    ]
    found = [(s.name, Path(s.output) / "config.yaml") for s in stages if s.output]
    found = [("quickstart", run / "quickstart.yaml"), *[(n, p) for n, p in found if p.is_file()]]
    for name, path in found:
        rel = os.path.relpath(path, run)
        lines += [
            f"<details><summary><code>{name}</code>: {rel}</summary>",
            "",
            "```yaml",
            path.read_text(encoding="utf-8").strip(),
            "```",
            "</details>",
            "",
        ]
    return lines


def commands_section(stages: Sequence[Any], state: dict[str, Any]) -> list[str]:
    lines = [
        "## The commands that ran",
        "",
        "Each stage is one `r3forge` command (server URLs are filled in "
        "at run time: `{teacher_url}` / `{student_url}` are vLLM servers the quickstart started):",
        "",
        "```bash",
    ]
    lines += [
        state["stages"][s.name].get("command", "") for s in stages if s.argv and s.name in state["stages"]
    ]
    return [*lines, "```"]


def next_section() -> list[str]:
    lines = [
        "## Next: the same recipes at paper scale (GPUs)",
        "",
        "The CPU configs used above have paper-scale siblings; each YAML's header carries its launch line.",
        "",
    ]
    lines += table(("job", "command"), [(job, f"`{cmd}`") for job, cmd in PAPER_SCALE])
    lines += [
        "",
        "Multi-node: `launch/sft_multinode_slurm.sh` (torchrun over SLURM; `MODULE=r3forge.agent.grpo` "
        "for GRPO). Publish a student: `r3forge export --run <sft run> --out <folder> --push <org/name>`.",
    ]
    return lines


def write_report(run: Path, config: Any, stages: Sequence[Any], state: dict[str, Any]) -> Path:
    done = sum(1 for s in stages if state["stages"].get(s.name, {}).get("status") == "done")
    header = [
        "# r3forge quickstart report",
        "",
        f"Run `{run}`, written {time.strftime('%Y-%m-%d %H:%M %Z')}. r3forge {__version__}, Python "
        f"{platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPU cores, "
        f"{torch.get_num_threads()} torch threads. {done} of {len(stages) - 1} stages ran before this report.",
        "",
        "The whole evidence path on one CPU with the embedded SmolLM2-135M-Instruct as teacher, reranker "
        "student and generator, on a synthetic world of fictional entities (no model can answer from "
        "memory): teacher annotation -> distilled verbal reranker -> single-turn RAG with IGP -> GRPO of "
        "a search agent with the student in the loop. A 135M model makes the numbers small; the point is "
        "that every stage is the real pipeline and every figure below comes from this run's files.",
        "",
        *precision_lines(state, stages),
        "",
    ]
    sections = [
        stages_section(stages, state),
        annotation_section(run, config.teacher_model, config.reranker_teacher),
        student_section(run),
        rag_section(run),
        agent_section(run),
        commands_section(stages, state),
        next_section(),
        configs_section(run, stages),
    ]
    text = "\n".join(header + [line for sec in sections if sec for line in [*sec, ""]])
    path = run / "REPORT.md"
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
