#!/bin/bash
# Tokens through the GRPO trainer per optimizer step at the paper config's lengths: TRL's padded step vs the
# packed, mask-aware one (agent/packed.py), from rollouts recorded with configs/grpo/agent_qwen2.5-3b.yaml's
# environment budgets and grouped by its batch settings (per-device 20 x grad-accum 8 = 160 rollouts).
#
#   bash tests/benchmarks/packing_paper_scale.sh POLICY [RUN_DIR]     # ~30 min on 2 cores, resumable
#
# POLICY: a format-warm-started generator (e.g. a quickstart's runs/quickstart-<time>/warmstart-sft/final).
# The rollouts: 160 HotpotQA questions (the test sample, never trained on; one generation batch of the paper's
# grouping), sampled at the paper's temperature 1.0 on vLLM (context: 4096-token rollouts + 512 for the
# prompt), with its 4 turns of at most 500 tokens, observations of at most 512 tokens, 3 documents shown per
# search and 4096-token rollouts, over a BM25 index of the HotpotQA sample's real Wikipedia paragraphs.
# Stand-ins, named: the policy is the embedded 135M model's warm start, not Qwen2.5-3B (how often and how long
# it searches is its own); the observations are the 3 raw paragraphs (the paper shows 3 verbal comments of at
# most 160 tokens each; both are capped at 512); one rollout per question (the paper samples G = 5 per
# question, which changes the grouping of lengths, not their spread). Writes $R/packing_estimate.json and
# prints it. Needs ../shared/data.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=.venv/bin/r3forge
P=${1:?usage: packing_paper_scale.sh POLICY [RUN_DIR]}
R=${2:-runs/packing_paper_scale}
H=${HOTPOTQA_DIR:-../shared/data/hotpotqa}
CONFIG=configs/grpo/agent_qwen2.5-3b.yaml
step() { echo "== $(date +%T) $1" >&2; }

[ -f "$R/corpus.jsonl" ] || { step pool; $B data pool --qa_path "$H/rpt_distractor_dev_sample_t*.jsonl" --output "$R/corpus.jsonl"; }
[ -d "$R/index" ] || { step index; $B index build --corpus "$R/corpus.jsonl" --kind bm25 --output "$R/index"; }
# the paper config's environment budgets, read from it (so the estimate follows the YAML)
budget() { .venv/bin/python -c "import sys, yaml; print(yaml.safe_load(open('$CONFIG'))['$1'])"; }
[ -d "$R/rollouts" ] || { step rollouts; $B eval agent --config configs/eval/agent_world_cpu.yaml \
  --dataset "$H/rpt_distractor_dev_sample_test.jsonl" --split all --max_questions 160 --batch_size 40 --model "$P" \
  --policy_backend vllm --max_model_len "$(( $(budget max_completion_length) + 512 ))" --temperature "$(budget temperature)" --index "$R/index" --observation raw \
  --num_retrieve "$(budget num_retrieve)" --num_shown "$(budget num_shown)" --doc_max_words 0 \
  --max_turns "$(budget max_turns)" --max_turn_tokens "$(budget max_turn_tokens)" \
  --max_obs_tokens "$(budget max_obs_tokens)" --max_completion_tokens "$(budget max_completion_length)" \
  --output_dir "$R/rollouts"; }
step estimate
.venv/bin/python tests/benchmarks/packing_estimate.py --rollouts "$R/rollouts/rows.jsonl" --config "$CONFIG" \
  --out "$R/packing_estimate.json"
