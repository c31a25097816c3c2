#!/bin/bash
# Does GRPO train the search agent, and does it learn more from the verbal reranker's comments than from raw
# passages? Three arms, several training seeds, held-out EM at every checkpoint.
#
#   STUDENT=<release folder> bash tests/benchmarks/bench_agent_grpo_seeds.sh QUICKSTART_RUN [RUN_DIR]
#   # resumable: run it again after an interruption (GRPO resumes from its last checkpoint); on 2 cores (fp32)
#   # ~65 min per (arm, seed) for raw and extractive, ~2 h for student (its vLLM server shares the cores)
#
# Needs a finished quickstart run (`r3forge quickstart`, the README's main job) for its synthetic world (500
# questions; the hashed 20% held out, 109 questions, are never trained on) and its BM25 index. Arms
# (ARMS="raw extractive student" by default):
#   raw         observation: raw (Search-R1): the passages themselves
#   extractive  observation: verbal from the *extractive stand-in* (rerank/extractive.py: no model, answer-
#               blind, quotes each passage's sentence that best matches the query, score 1-5 by query-word
#               coverage), a named stand-in for a student whose comments keep the evidence
#   student     observation: verbal from the distilled student in STUDENT (a release folder, served by vLLM),
#               e.g. the cite_all student (tests/benchmarks/README.md): CITE_ALL=true QUICKSTART_ARM=false bash
#               tests/benchmarks/bench_student_evidence.sh QUICKSTART_RUN runs/student_cite, then
#               STUDENT=runs/student_cite/release
# Each arm gets its own format warm start (96 training questions with observations of its kind; the SFT config
# configs/sft/agent_warmstart_cpu.yaml), evaluated once (greedy is deterministic). Then per seed in SEEDS
# (default "0 1 2"): GRPO with configs/grpo/agent_world_cpu.yaml from that warm start for STEPS steps (default
# 64; the learning rate decays linearly to 0 at the last step), a checkpoint every EVERY steps (default 16),
# each evaluated greedy on every held-out question (`eval agent`, configs/eval/agent_world_cpu.yaml). After a
# run's evaluations its checkpoints keep only their weights (the optimizer state, 1 GiB each, is deleted).
# Each finished run's result files are copied to LEDGER (default tests/benchmarks/results/agent_seeds, committed:
# a run folder does not outlive the lent machine; tests/benchmarks/agent_ledger.py), and a run already in
# LEDGER is skipped, so the nine runs can be spread over sessions on fresh machines. The warm-start SFT is pinned
# to fp32 (--bf16 false; GRPO's YAML already is), so every machine trains in the same precision.
# The tables, intervals and plots: tests/benchmarks/agent_learning_tables.py LEDGER (run at the end).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=.venv/bin/r3forge
QS=${1:?usage: bench_agent_grpo_seeds.sh QUICKSTART_RUN [RUN_DIR]}
R=${2:-runs/bench_agent_seeds}
ARMS=${ARMS:-raw extractive student}
SEEDS=${SEEDS:-0 1 2}
STEPS=${STEPS:-64}
EVERY=${EVERY:-16}
LEDGER=${LEDGER:-tests/benchmarks/results/agent_seeds}
for f in world/questions.jsonl index/index.json; do
  [ -e "$QS/$f" ] || { echo "bench_agent_grpo_seeds: $QS/$f is missing: run the quickstart first" >&2; exit 2; }
done
Q="$QS/world/questions.jsonl"
ENV="--index $QS/index --num_retrieve 3 --num_shown 2 --doc_max_words 30"
step() { echo "== $(date +%T) $1" >&2; }
obs() {
  case $1 in
    raw) echo "--observation raw" ;;
    extractive) echo "--observation verbal --reranker_backend extractive --reranker_serve false" ;;
    student)
      [ -f "${STUDENT:-}/config.json" ] || { echo "bench_agent_grpo_seeds: the student arm needs STUDENT=<release folder of a verbal reranker>, got '${STUDENT:-}'" >&2; exit 2; }
      echo "--observation verbal --reranker_model $STUDENT --reranker_tokenizer $STUDENT --reranker_max_tokens 64 --reranker_serve true" ;;
    *) echo "bench_agent_grpo_seeds: unknown arm '$1' in ARMS (raw, extractive, student)" >&2; exit 2 ;;
  esac
}
mkdir -p "$R"
for o in $ARMS; do obs "$o" >/dev/null; done  # every arm's settings checked before hours of work
[ -z "${STUDENT:-}" ] || echo "$STUDENT" >"$R/student_path.txt"

for seed in $SEEDS; do
  for o in $ARMS; do
    [ -f "$LEDGER/${o}_s$seed/eval_$STEPS/summary.json" ] && { step "$o-seed$seed: in $LEDGER already"; continue; }
    OBS=$(obs "$o")
    WS="$R/ws_${o}_sft/final"
    EV="--config configs/eval/agent_world_cpu.yaml --dataset $Q $ENV $OBS --max_questions 200"
    # shellcheck disable=SC2086  # the flag strings split on purpose
    [ -f "$R/ws_$o.jsonl" ] || { step "ws-$o-data"; $B data agent-warmstart --dataset "$Q" $ENV $OBS --max_questions 96 --output "$R/ws_$o.jsonl"; }
    [ -d "$WS" ] || { step "ws-$o-sft"; $B sft --config configs/sft/agent_warmstart_cpu.yaml --bf16 false --dataset "$R/ws_$o.jsonl" --model_name_or_path smollm2-135m-instruct --output_dir "$R/ws_${o}_sft" --resume_from_checkpoint auto; }
    # shellcheck disable=SC2086
    [ -f "$R/${o}_eval_0/summary.json" ] || { step "eval-$o-warmstart"; $B eval agent $EV --model "$WS" --output_dir "$R/${o}_eval_0"; }
    D="$R/${o}_s$seed"
    # shellcheck disable=SC2086
    [ -f "$D/grpo/final_metrics.json" ] || { step "grpo-$o-seed$seed"; $B grpo --config configs/grpo/agent_world_cpu.yaml --dataset "$Q" $ENV $OBS --model_name_or_path "$WS" --seed "$seed" --max_steps "$STEPS" --save_steps "$EVERY" --save_total_limit "$((STEPS / EVERY + 1))" --output_dir "$D/grpo" --resume_from_checkpoint auto; }
    for ((s = EVERY; s <= STEPS; s += EVERY)); do
      M="$D/grpo/checkpoint-$s"
      [ "$s" = "$STEPS" ] && M="$D/grpo/final"
      # shellcheck disable=SC2086
      [ -f "$D/eval_$s/summary.json" ] || { step "eval-$o-seed$seed-$s"; $B eval agent $EV --model "$M" --output_dir "$D/eval_$s"; }
    done
    .venv/bin/python tests/benchmarks/agent_ledger.py "$R" "$o" "$seed" "$LEDGER" "$Q"
    rm -rf "$D/grpo/checkpoint-$STEPS"  # the same weights as final/
    rm -f "$D"/grpo/checkpoint-*/{optimizer.pt,scheduler.pt,rng_state.pth}
  done
done
.venv/bin/python tests/benchmarks/agent_learning_tables.py "$LEDGER"
