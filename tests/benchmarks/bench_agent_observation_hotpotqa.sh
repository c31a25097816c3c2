#!/bin/bash
# The verbal reranker in use: the search agent on HotpotQA reading the score-first 135M student's comments
# (observation: verbal) vs the raw passages (observation: raw, the Search-R1 baseline).
#
#   bash tests/benchmarks/bench_agent_observation_hotpotqa.sh [RUN_DIR]     # ~45 min on 2 cores, resumable
#
# Each arm gets its own format warm start (96 questions of the HotpotQA train sample, observations of its own
# kind), then both are evaluated greedy on the first 40 questions of the test sample (never trained on) over
# one BM25 index of the pooled train + test passages. Prints one table and writes it to RUN_DIR/tables.json
# (observation_arms_table.py; BESIDE=... says what shared the cores): the baseline is the raw arm, and the
# verbal - raw row carries paired bootstrap 95% intervals over the questions. Needs ../shared/data.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=.venv/bin/r3forge
R=${1:-runs/bench_agent_observation}
H=${HOTPOTQA_DIR:-../shared/data/hotpotqa}
A=$R/agent
ENV="--index $A/index --num_retrieve 3 --num_shown 2 --doc_max_words 40"
VERB="--observation verbal --reranker_model $R/student_sf_release --reranker_serve true --reranker_max_tokens 64 --reranker_rank_by expected"
EV="--config configs/eval/agent_world_cpu.yaml --dataset $H/rpt_distractor_dev_sample_test.jsonl --split all --max_questions 40 --max_obs_tokens 200"
WS="--dataset $H/rpt_distractor_dev_sample_train.jsonl --heldout_fraction 0 --max_questions 96 $ENV"
step() { echo "== $(date +%T) $1" >&2; }

[ -d "$R/rules_train_sf" ] || { step rules; $B annotate rules --qa_path "$H/rpt_distractor_dev_sample_train.jsonl" --validation_fraction 0 --max_per_score 600 --score_first true --output_dir "$R/rules_train_sf"; }
[ -d "$R/student_sf/final" ] || { step sft; $B sft --config configs/sft/verbal_reranker_cpu.yaml --bf16 true --dataset "$R/rules_train_sf" --eval_dataset '' --eval_split '' --output_dir "$R/student_sf" --max_steps 100 --save_steps 50 --resume_from_checkpoint auto; }
[ -d "$R/student_sf_release" ] || { step export; $B export --run "$R/student_sf" --out "$R/student_sf_release"; }
[ -f "$A/corpus.jsonl" ] || { step pool; $B data pool --qa_path "$H/rpt_distractor_dev_sample_t*.jsonl" --output "$A/corpus.jsonl"; }
[ -d "$A/index" ] || { step index; $B index build --corpus "$A/corpus.jsonl" --kind bm25 --output "$A/index"; }
# shellcheck disable=SC2086  # the flag strings split on purpose
[ -f "$A/ws_raw.jsonl" ] || { step ws-raw; $B data agent-warmstart $WS --observation raw --output "$A/ws_raw.jsonl"; }
# shellcheck disable=SC2086
[ -f "$A/ws_verbal.jsonl" ] || { step ws-verbal; $B data agent-warmstart $WS $VERB --output "$A/ws_verbal.jsonl"; }
for o in raw verbal; do
  [ -d "$A/ws_${o}_sft/final" ] || { step "sft-$o"; $B sft --config configs/sft/agent_warmstart_cpu.yaml --dataset "$A/ws_$o.jsonl" --output_dir "$A/ws_${o}_sft"; }
done
# shellcheck disable=SC2086
[ -d "$A/eval_raw" ] || { step eval-raw; $B eval agent $EV $ENV --observation raw --model "$A/ws_raw_sft/final" --output_dir "$A/eval_raw"; }
# shellcheck disable=SC2086
[ -d "$A/eval_verbal" ] || { step eval-verbal; $B eval agent $EV $ENV $VERB --model "$A/ws_verbal_sft/final" --output_dir "$A/eval_verbal"; }

.venv/bin/python tests/benchmarks/observation_arms_table.py "$A/eval_raw" "$A/eval_verbal" "$R/tables.json" --beside "${BESIDE:-not recorded}"
