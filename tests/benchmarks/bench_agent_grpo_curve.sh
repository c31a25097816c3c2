#!/bin/bash
# How held-out EM moves with the number of GRPO steps: one arm of the learning bench trained for STEPS steps
# (default 64) with a checkpoint every EVERY steps (default 16), each checkpoint evaluated greedy on every
# held-out question; the table (agent_learning_tables.py) gives each one's EM gain over the warm start with a
# paired bootstrap 95% interval.
#
#   bash tests/benchmarks/bench_agent_grpo_curve.sh QUICKSTART_RUN ARM [RUN_DIR]   # resumable; ~60 min on 2 cores
#
# ARM is raw or extractive (see bench_agent_grpo_learning.sh); run that bench first for ARM (ARMS=ARM): this
# one reuses its warm start and its warm start's evaluation from RUN_DIR. Same GRPO settings as there
# (configs/grpo/agent_world_cpu.yaml, seed 0); only max_steps differs, so the learning-rate schedule (linear
# decay to 0 at the last step) is stretched over STEPS steps and checkpoint 32 here is not that bench's 32.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=.venv/bin/r3forge
QS=${1:?usage: bench_agent_grpo_curve.sh QUICKSTART_RUN ARM [RUN_DIR]}
O=${2:?usage: bench_agent_grpo_curve.sh QUICKSTART_RUN ARM [RUN_DIR]}
R=${3:-runs/bench_agent_learning}
STEPS=${STEPS:-64}
EVERY=${EVERY:-16}
case $O in
  raw) OBS="--observation raw" ;;
  extractive) OBS="--observation verbal --reranker_backend extractive --reranker_serve false" ;;
  *) echo "bench_agent_grpo_curve: ARM must be raw or extractive, got '$O'" >&2; exit 2 ;;
esac
WS="$R/ws_${O}_sft/final"
for f in "$WS/config.json" "$R/eval_${O}_before/summary.json"; do
  [ -e "$f" ] || { echo "bench_agent_grpo_curve: $f is missing: run ARMS=$O bench_agent_grpo_learning.sh first" >&2; exit 2; }
done
Q="$QS/world/questions.jsonl"
ENV="--index $QS/index --num_retrieve 3 --num_shown 2 --doc_max_words 30"
C="$R/curve_$O"
step() { echo "== $(date +%T) $1" >&2; }

# shellcheck disable=SC2086  # the flag strings split on purpose
[ -f "$C/grpo/final_metrics.json" ] || { step "grpo-$O-$STEPS"; $B grpo --config configs/grpo/agent_world_cpu.yaml --dataset "$Q" $ENV $OBS --model_name_or_path "$WS" --max_steps "$STEPS" --save_steps "$EVERY" --save_total_limit "$((STEPS / EVERY + 1))" --output_dir "$C/grpo" --resume_from_checkpoint auto; }
for ((s = EVERY; s <= STEPS; s += EVERY)); do
  M="$C/grpo/checkpoint-$s"
  [ "$s" = "$STEPS" ] && M="$C/grpo/final"
  # shellcheck disable=SC2086
  [ -f "$C/eval_$s/summary.json" ] || { step "eval-$O-$s"; $B eval agent --config configs/eval/agent_world_cpu.yaml --dataset "$Q" $ENV $OBS --max_questions 200 --model "$M" --output_dir "$C/eval_$s"; }
done
.venv/bin/python tests/benchmarks/agent_learning_tables.py "$R"
