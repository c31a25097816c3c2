#!/bin/bash
# Does GRPO train the search agent, and does reading the verbal reranker's comments (observation: verbal,
# Verbal-R3) train a better one than reading raw passages (observation: raw, Search-R1)?
#
#   bash tests/benchmarks/bench_agent_grpo_learning.sh QUICKSTART_RUN [RUN_DIR]   # resumable; ~100 min on 2 cores
#
# Needs a finished quickstart run (`r3forge quickstart`, the README's main job): its synthetic world (500
# questions; the hashed 20% held out, 109 questions, are never trained on), BM25 index, distilled verbal
# reranker student (`reranker/`) and the verbal arm's format warm start (`warmstart-sft/final`, 96 training
# questions with verbal observations). Three arms (ARMS="verbal raw extractive" by default):
#   verbal      observation: verbal, the quickstart's distilled 135M student as the reranker (served by vLLM)
#   raw         observation: raw (Search-R1): the passages themselves
#   extractive  observation: verbal from the *extractive stand-in* (rerank/extractive.py: no model, answer-
#               blind, quotes each passage's sentence that best matches the query, score 1-5 by query-word
#               coverage), standing in for a teacher-quality student whose comments keep the evidence
# The raw and extractive arms get their own warm start the same way (same questions, settings, SFT config).
# Then, per arm, the same GRPO (configs/grpo/agent_world_cpu.yaml: STEPS steps, seed 0, G 4, 8 rollouts per
# step, the same token budgets; the rollout engine is the recipe's default) from its own warm start, and a
# greedy `eval agent` of the warm start and of the GRPO checkpoint on every held-out question. Prints the table
# (tests/benchmarks/agent_learning_tables.py: EM/F1 with paired bootstrap 95% intervals over the questions,
# searches per question, RA-R, CUE-R) and writes the reward curves to RUN_DIR/reward_curves.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=.venv/bin/r3forge
QS=${1:?usage: bench_agent_grpo_learning.sh QUICKSTART_RUN [RUN_DIR]}
R=${2:-runs/bench_agent_learning}
STEPS=${STEPS:-32}
HELDOUT_Q=${HELDOUT_Q:-200}  # every held-out question (109 of the quickstart's 500)
for f in world/questions.jsonl index reranker/config.json warmstart-sft/final/config.json; do
  [ -e "$QS/$f" ] || { echo "bench_agent_grpo_learning: $QS/$f is missing: run the quickstart first" >&2; exit 2; }
done
mkdir -p "$R"
Q="$QS/world/questions.jsonl"
ENV="--index $QS/index --num_retrieve 3 --num_shown 2 --doc_max_words 30"
RR="--reranker_model $QS/reranker --reranker_tokenizer $QS/reranker --reranker_max_tokens 64"
step() { echo "== $(date +%T) $1" >&2; }

ARMS=${ARMS:-verbal raw extractive}
for o in $ARMS; do
  case $o in
    verbal) WS="$QS/warmstart-sft/final"; OBS="--observation verbal $RR --reranker_serve true" ;;
    raw) WS="$R/ws_raw_sft/final"; OBS="--observation raw" ;;
    extractive) WS="$R/ws_extractive_sft/final"; OBS="--observation verbal --reranker_backend extractive --reranker_serve false" ;;
    *) echo "bench_agent_grpo_learning: unknown arm '$o' in ARMS (verbal, raw, extractive)" >&2; exit 2 ;;
  esac
  if [ $o != verbal ]; then
    # shellcheck disable=SC2086  # the flag strings split on purpose
    [ -f "$R/ws_$o.jsonl" ] || { step "ws-$o-data"; $B data agent-warmstart --dataset "$Q" $ENV $OBS --max_questions 96 --output "$R/ws_$o.jsonl"; }
    [ -d "$WS" ] || { step "ws-$o-sft"; $B sft --config configs/sft/agent_warmstart_cpu.yaml --dataset "$R/ws_$o.jsonl" --model_name_or_path smollm2-135m-instruct --output_dir "$R/ws_${o}_sft" --resume_from_checkpoint auto; }
  fi
  EV="--config configs/eval/agent_world_cpu.yaml --dataset $Q $ENV $OBS --max_questions $HELDOUT_Q"
  # shellcheck disable=SC2086
  [ -f "$R/eval_${o}_before/summary.json" ] || { step "eval-$o-before"; $B eval agent $EV --model "$WS" --output_dir "$R/eval_${o}_before"; }
  # shellcheck disable=SC2086
  [ -f "$R/grpo_$o/final_metrics.json" ] || { step "grpo-$o"; $B grpo --config configs/grpo/agent_world_cpu.yaml --dataset "$Q" $ENV $OBS --model_name_or_path "$WS" --max_steps "$STEPS" --save_steps 8 --output_dir "$R/grpo_$o" --resume_from_checkpoint auto; }
  # shellcheck disable=SC2086
  [ -f "$R/eval_${o}_after/summary.json" ] || { step "eval-$o-after"; $B eval agent $EV --model "$R/grpo_$o/final" --output_dir "$R/eval_${o}_after"; }
done
.venv/bin/python tests/benchmarks/agent_learning_tables.py "$R"
