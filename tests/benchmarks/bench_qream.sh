#!/bin/bash
# QREAM at CPU scale, measured: the fact judges on a labelled probe set, golden-rewrite rates of the LLM (ICL)
# rewriter and of the offline extractive teacher, and a QREAM-FT student vs r_raw on held-out questions.
#
#   bash tests/benchmarks/bench_qream.sh [RUN_DIR] [STAGES]   # resumable; STAGES: a subset of "golden student
#                                    # heldout icl curve probe rag extheld iclgold" (default: all, in this order)
# SmolLM2-135M (embedded) is rewriter, reader, fact extractor and judge, behind vLLM servers each job starts
# and stops. HotpotQA: r_raw = each question's first 5 own paragraphs; training questions from the train
# sample, held-out ones from the test sample (never trained on). The synthetic world: r_raw = BM25 top-5 over
# its corpus; training questions: the first 50 of the agent's training split, held-out: the first 50 of the
# agent's held-out split (the same hashed split). Prints the tables and writes them, their figures and the
# provenance to the result file RUN_DIR/tables.json (python .../qream_tables.py; BESIDE: what shared the cores).
# Sizes (env): TRAIN_Q (100 HotpotQA questions, half as many world ones), HELDOUT_Q (50 per dataset),
# PROBE_Q (25 HotpotQA dev questions, 4/5 as many world held-out ones). vLLM's CPU worker is bound to every
# core (VLLM_CPU_OMP_THREADS_BIND=0-<n-1>; vLLM's own default keeps one core for its scheduler). On 2 cores
# prefill runs at ~200 tokens/s, so each stage takes tens of minutes; resumable, one stage at a time. A
# batch of 128 requests in flight outlasts the default 300 s HTTP timeout there (a timed-out request is
# retried from scratch: 39 of 300 fact requests were), hence --request_timeout_s 1800.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=.venv/bin/r3forge
R=${1:-runs/bench_qream}
STAGES=${2:-golden student heldout icl curve probe rag extheld iclgold}
TRAIN_Q=${TRAIN_Q:-100}
HELDOUT_Q=${HELDOUT_Q:-50}
PROBE_Q=${PROBE_Q:-25}
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-0-$(($(nproc) - 1))}
H=${HOTPOTQA_DIR:-../shared/data/hotpotqa}
M="--backend openai --model smollm2-135m-instruct --serve true --tokenizer smollm2-135m-instruct --batch_size 32 --concurrency 4 --request_timeout_s 1800 --progress false"
Q="--config configs/annotate/qream_hotpotqa_cpu.yaml --index '' --seed_qa_path $H/rpt_distractor_dev_sample_train.jsonl"
step() { echo "== $(date +%T) $1" >&2; }
has() { [[ " $STAGES " == *" $1 "* ]]; }

[ -f "$R/world/questions.jsonl" ] || { step world; $B data synth-world --seed 0 --output_dir "$R/world"; }
[ -d "$R/world_index" ] || { step world-index; $B index build --corpus "$R/world/corpus.jsonl" --kind bm25 --output "$R/world_index"; }
# the world's split is the agent's (r3forge.agent.data.is_heldout: a hash of the question id, heldout_fraction 0.2
# as in configs/grpo/agent_world_cpu.yaml), so QREAM's held-out world questions are the agent's held-out ones
.venv/bin/python - "$R/world/questions.jsonl" "$((TRAIN_Q / 2))" "$HELDOUT_Q" "$R/world_train.jsonl" "$R/world_heldout.jsonl" <<'PY'
import json, sys
from r3forge.agent.data import is_heldout
src, n_train, n_heldout, train, heldout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]
split = {True: [], False: []}
for line in open(src, encoding="utf-8").read().splitlines():
    split[is_heldout(json.loads(line)["id"], 0.2)].append(line)
for path, rows in ((train, split[False][:n_train]), (heldout, split[True][:n_heldout])):
    open(path, "w", encoding="utf-8").write("".join(r + "\n" for r in rows))
PY
head -n "$TRAIN_Q" "$H/rpt_distractor_dev_sample_train.jsonl" > "$R/hotpotqa_train.jsonl"
head -n "$HELDOUT_Q" "$H/rpt_distractor_dev_sample_test.jsonl" > "$R/hotpotqa_heldout.jsonl"
W="--index $R/world_index --seed_qa_path $R/world/questions.jsonl"

if has golden; then  # 1. golden rewrites of the extractive teacher on the training questions
  for d in hotpotqa world; do
    [ $d = hotpotqa ] && S="$Q" || S="$Q $W"
    [ -f "$R/ext_${d}_train/report.json" ] || { step "extractive-$d-train"; eval $B annotate qream $S --qa_path "$R/${d}_train.jsonl" --max_questions "$TRAIN_Q" --rewriter extractive --echo_guard true --validation_fraction 0 $M --output_dir "$R/ext_${d}_train"; }
  done
fi
if has student; then  # 2. QREAM-FT: the embedded model distilled on the HotpotQA + world golden rewrites
  [ -d "$R/ft_data" ] || { step ft-data; .venv/bin/python - "$R" <<'EOF'
import sys
from pathlib import Path
import datasets
r = Path(sys.argv[1])
rows = [x for d in ("hotpotqa", "world") for x in datasets.load_from_disk(str(r / f"ext_{d}_train" / "sft"))["train"]]
datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(r / "ft_data"))
print(f"{len(rows)} golden rewrites -> {r / 'ft_data'}", file=sys.stderr)
EOF
  }
  [ -d "$R/ft/final" ] || { step sft; $B sft --config configs/sft/qream_ft_cpu.yaml --dataset "$R/ft_data" --eval_dataset '' --eval_split '' --eval_strategy no --save_strategy no --num_train_epochs 2 --output_dir "$R/ft" --resume_from_checkpoint auto; }
  [ -f "$R/ft_merged/config.json" ] || $B export --run "$R/ft" --out "$R/ft_merged" --merge_lora true  # vLLM serves the merged model
fi
if has heldout; then  # 3. held-out: r_raw vs the student's rewrites (a fixed reader: the embedded model)
  for d in hotpotqa world; do
    [ $d = hotpotqa ] && S="--index ''" || S="--index $R/world_index"
    [ -f "$R/ft_$d/report.json" ] || { step "student-$d"; eval $B rewrite --config configs/rewrite/qream_icl_hotpotqa_cpu.yaml $S --qa_path "$R/${d}_heldout.jsonl" --method ft --demos_from "''" $M --model "$R/ft_merged" --tokenizer "$R/ft_merged" --reader_model smollm2-135m-instruct --output_dir "$R/ft_$d"; }
  done
fi
if has icl; then  # 4. QREAM-ICL (the 135M rewriter, its stylistic demos) on the held-out questions
  for d in hotpotqa world; do
    [ $d = hotpotqa ] && S="--index '' --seed_qa_path $H/rpt_distractor_dev_sample_train.jsonl" || S="$W"
    [ -f "$R/icl_$d/report.json" ] || { step "icl-$d"; eval $B rewrite --config configs/rewrite/qream_icl_hotpotqa_cpu.yaml $S --qa_path "$R/${d}_heldout.jsonl" --demos_from "''" $M --output_dir "$R/icl_$d"; }
  done
fi
if has curve; then  # 5. learning curve: the student on a quarter and half of the golden rewrites (same epochs, seed)
  N=$(.venv/bin/python -c "import datasets, sys; print(len(datasets.load_from_disk(sys.argv[1])['train']))" "$R/ft_data")
  for n in $((N / 4)) $((N / 2)); do
    [ -d "$R/ft_data_$n" ] || .venv/bin/python -c "import datasets, sys; d = datasets.load_from_disk(sys.argv[1]); datasets.DatasetDict({'train': d['train'].shuffle(seed=0).select(range($n))}).save_to_disk(sys.argv[2])" "$R/ft_data" "$R/ft_data_$n"
    [ -d "$R/ft_$n/final" ] || { step "sft-$n"; $B sft --config configs/sft/qream_ft_cpu.yaml --dataset "$R/ft_data_$n" --eval_dataset '' --eval_split '' --eval_strategy no --save_strategy no --num_train_epochs 2 --output_dir "$R/ft_$n" --resume_from_checkpoint auto; }
    [ -f "$R/ft_${n}_merged/config.json" ] || $B export --run "$R/ft_$n" --out "$R/ft_${n}_merged" --merge_lora true
    for d in hotpotqa world; do
      [ $d = hotpotqa ] && S="--index ''" || S="--index $R/world_index"
      [ -f "$R/ft_${n}_$d/report.json" ] || { step "student-$n-$d"; eval $B rewrite --config configs/rewrite/qream_icl_hotpotqa_cpu.yaml $S --qa_path "$R/${d}_heldout.jsonl" --method ft --demos_from "''" $M --model "$R/ft_${n}_merged" --tokenizer "$R/ft_${n}_merged" --reader_model smollm2-135m-instruct --output_dir "$R/ft_${n}_$d"; }
    done
  done
fi
if has probe; then  # 6. the three fact judges on claims built from the data
  [ -f "$R/probe_hotpotqa/report.json" ] || { step probe-hotpotqa; eval $B annotate qream-judge-probe --qa_path "$H/rpt_distractor_dev_sample_dev.jsonl" --max_questions "$PROBE_Q" $M --output_dir "$R/probe_hotpotqa"; }
  [ -f "$R/probe_world/report.json" ] || { step probe-world; eval $B annotate qream-judge-probe --qa_path "$R/world_heldout.jsonl" --index "$R/world_index" --max_questions "$((PROBE_Q * 4 / 5))" $M --output_dir "$R/probe_world"; }
fi
if has rag; then  # 7. in the RAG evaluation: none and IGP, each with its `+qream` twin rewritten by the student
  [ -f "$R/rag_hotpotqa/summary.json" ] || { step rag-hotpotqa; $B eval rag --config configs/eval/igp_hotpotqa_cpu.yaml --qa_path "$R/hotpotqa_heldout.jsonl" --max_questions "$HELDOUT_Q" --methods none igp --top_m 3 5 --thresholds 0.0 --rewrite ft --rewriter_model "$R/ft_merged" --output_dir "$R/rag_hotpotqa"; }
fi
if has extheld; then  # 8. the extractive teacher's candidates on the held-out questions: the golden (oracle) row
  for d in hotpotqa world; do  # of the held-out table and the selection ablation on unseen questions
    [ $d = hotpotqa ] && S="$Q" || S="$Q $W"
    [ -f "$R/ext_${d}_heldout/report.json" ] || { step "extractive-$d-heldout"; eval $B annotate qream $S --qa_path "$R/${d}_heldout.jsonl" --max_questions "$HELDOUT_Q" --rewriter extractive --echo_guard true --validation_fraction 0 $M --output_dir "$R/ext_${d}_heldout"; }
  done
fi
if has iclgold; then  # 9. the golden rate of the 135M ICL rewriter (the paper's path) on the held-out questions
  for d in hotpotqa world; do
    [ $d = hotpotqa ] && S2="$Q" || S2="$Q $W"
    [ -f "$R/iclgold_${d}_heldout/report.json" ] || { step "icl-golden-$d"; eval $B annotate qream $S2 --qa_path "$R/${d}_heldout.jsonl" --echo_guard true --validation_fraction 0 $M --output_dir "$R/iclgold_${d}_heldout"; }
  done
fi
.venv/bin/python tests/benchmarks/qream_tables.py "$R" --beside "${BESIDE:-not recorded}"
