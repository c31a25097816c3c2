#!/bin/bash
# A verbal reranker student whose comments keep the evidence: distilled from the rule teacher's evidence-quoting
# labels, as the search agent will use it, then measured on held-out pairs and in the agent's observations.
#
#   bash tests/benchmarks/bench_student_evidence.sh QUICKSTART_RUN [RUN_DIR]   # resumable; ~65 min on 2 cores (AVX2)
#
# 1. A world of its own (`synth-world --seed 7`: 400 questions over 2,000 passages; the quickstart's worlds are
#    seeds 0 and 1, so no entity or question of the learning bench is seen).
# 2. The rule teacher's labels (`annotate rules`): every passage cut to 30 words as the agent's environment cuts it
#    (`--doc_max_words 30`), each multi-hop question's sub-questions as questions of their own (the queries the
#    agent sends, `--sub_questions true`), each score class of the training split capped at PER_SCORE rows
#    (default 200: 1,000 rows), a tenth of the questions held out. CITE_ALL=true: every comment opens with a quote.
# 3. SFT of the embedded SmolLM2-135M (configs/sft/verbal_reranker_world_cpu.yaml) for EPOCHS epochs (default 2),
#    in fp32 on every machine (BF16=auto: bf16 where the CPU has bf16 units, so students from different CPUs differ),
#    the task metrics (parse rate, Spearman, NDCG@k, quote rate and faithfulness) on 200 held-out pairs after each
#    epoch (`reranker-sft`'s metrics.jsonl, task_eval/), then a release folder.
# 4. tests/benchmarks/bench_observation_evidence.py: raw, the extractive stand-in, this student and the
#    quickstart's on the learning bench's fixed searches (RA-R, hop recall, quote faithfulness) -> observations.json.
#    QUICKSTART_ARM=false leaves the quickstart's student out (tests/benchmarks/student_evidence_curve.sh).
# The student's release folder is what `STUDENT=` of bench_agent_grpo_seeds.sh takes.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=.venv/bin/r3forge
QS=${1:?usage: bench_student_evidence.sh QUICKSTART_RUN [RUN_DIR]}
R=${2:-runs/student_evidence}
PER_SCORE=${PER_SCORE:-200}
EPOCHS=${EPOCHS:-2}
CITE_ALL=${CITE_ALL:-false}
BF16=${BF16:-false}
QS_ARM=()
[ "${QUICKSTART_ARM:-true}" = false ] || QS_ARM=(--student "quickstart=$QS/reranker")
step() { echo "== $(date +%T) $1" >&2; }
mkdir -p "$R"
[ -d "$R/world/hf" ] || { step world; $B data synth-world --seed 7 --num_passages 2000 --num_questions 400 --output_dir "$R/world"; }
[ -f "$R/rules/labels.json" ] || { step rules; $B annotate rules --qa_path "$R/world/hf/questions" --validation_fraction 0.1 --max_per_score "$PER_SCORE" --doc_max_words 30 --sub_questions true --cite_all "$CITE_ALL" --output_dir "$R/rules"; }
[ -f "$R/sft/final_metrics.json" ] || { step sft; $B sft --config configs/sft/verbal_reranker_world_cpu.yaml --dataset "$R/rules" --eval_dataset '' --eval_split validation --num_train_epochs "$EPOCHS" --bf16 "$BF16" --task_eval_samples 200 --max_eval_samples 200 --task_eval_at_start false --eval_strategy epoch --save_total_limit "$EPOCHS" --report_to none --output_dir "$R/sft" --resume_from_checkpoint auto; }
[ -f "$R/release/config.json" ] || { step export; $B export --run "$R/sft" --out "$R/release"; }
[ -f "$R/observations.json" ] || { step observations; .venv/bin/python tests/benchmarks/bench_observation_evidence.py --run "$QS" --student "evidence=$R/release" "${QS_ARM[@]}" --out "$R/observations.json"; }
.venv/bin/python - "$R" <<'EOF'
import json
import sys
from pathlib import Path

from r3forge.quickstart.report import heldout_rankings

r = Path(sys.argv[1])
refs = heldout_rankings(r / "sft" / "task_eval")
print(f"held-out pairs: NDCG@3 of input order {refs['input order']['ndcg@3']:.3f}, of random order "
      f"{refs['random order (mean of 100 shuffles)']['ndcg@3']:.3f}\n")
keys = ("parse_rate", "score_accuracy", "spearman", "ndcg@3", "expected_ndcg@3", "quote_rate", "quote_faithfulness")
print("| epoch | step | " + " | ".join(keys) + " |")
print("|---:|---:|" + "---:|" * len(keys))
for m in map(json.loads, (r / "sft" / "metrics.jsonl").read_text().splitlines()):
    if "eval_task_parse_rate" in m:
        cells = [m.get(f"eval_task_{k}") for k in keys]
        print(f"| {m['epoch']:.0f} | {m['step']} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |")
EOF
