#!/bin/bash
# QREAM at CPU scale, measured: the fact judges on a labelled probe set, golden-rewrite rates of the LLM (ICL)
# rewriter and of the offline extractive teacher, and a QREAM-FT student vs r_raw on held-out questions.
#
#   bash tests/benchmarks/bench_qream.sh [RUN_DIR] [STAGES]     # resumable; STAGES: a subset of "probe golden
#                                                               # student heldout icl" (default: all)
# SmolLM2-135M (embedded) is rewriter, reader, fact extractor and judge, behind vLLM servers each job starts
# and stops. HotpotQA: r_raw = each question's first 5 own paragraphs; training questions from the train
# sample, held-out ones from the test sample (never trained on). The synthetic world: r_raw = BM25 top-5 over
# its corpus; training questions 0-149, held-out 400-499. Prints the tables (python .../qream_tables.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=.venv/bin/r3forge
R=${1:-runs/bench_qream}
STAGES=${2:-probe golden student heldout icl}
H=${HOTPOTQA_DIR:-../shared/data/hotpotqa}
M="--backend openai --model smollm2-135m-instruct --serve true --tokenizer smollm2-135m-instruct --batch_size 32 --concurrency 4 --progress false"
Q="--config configs/annotate/qream_hotpotqa_cpu.yaml --index '' --seed_qa_path $H/rpt_distractor_dev_sample_train.jsonl"
step() { echo "== $(date +%T) $1" >&2; }
has() { [[ " $STAGES " == *" $1 "* ]]; }

[ -f "$R/world/questions.jsonl" ] || { step world; $B data synth-world --seed 0 --output_dir "$R/world"; }
[ -d "$R/world_index" ] || { step world-index; $B index build --corpus "$R/world/corpus.jsonl" --kind bm25 --output "$R/world_index"; }
head -n 150 "$R/world/questions.jsonl" > "$R/world_train.jsonl"
sed -n 401,460p "$R/world/questions.jsonl" > "$R/world_heldout.jsonl"
head -n 150 "$H/rpt_distractor_dev_sample_train.jsonl" > "$R/hotpotqa_train.jsonl"
head -n 60 "$H/rpt_distractor_dev_sample_test.jsonl" > "$R/hotpotqa_heldout.jsonl"
W="--index $R/world_index --seed_qa_path $R/world/questions.jsonl"

if has probe; then  # 1. the three fact judges on claims built from the data
  [ -f "$R/probe_hotpotqa/report.json" ] || { step probe-hotpotqa; eval $B annotate qream-judge-probe --qa_path "$H/rpt_distractor_dev_sample_dev.jsonl" --max_questions 100 $M --output_dir "$R/probe_hotpotqa"; }
  [ -f "$R/probe_world/report.json" ] || { step probe-world; eval $B annotate qream-judge-probe --qa_path "$R/world_heldout.jsonl" --index "$R/world_index" --max_questions 60 $M --output_dir "$R/probe_world"; }
fi
if has golden; then  # 2. golden rewrites of the extractive teacher (training questions and held-out ones)
  for d in hotpotqa world; do
    [ $d = hotpotqa ] && S="$Q" || S="$Q $W"
    for split in train heldout; do
      [ -f "$R/ext_${d}_$split/report.json" ] || { step "extractive-$d-$split"; eval $B annotate qream $S --qa_path "$R/${d}_$split.jsonl" --max_questions 150 --rewriter extractive --echo_guard true --validation_fraction 0 $M --output_dir "$R/ext_${d}_$split"; }
    done
  done
fi
if has student; then  # 3. QREAM-FT: the embedded model distilled on the HotpotQA + world golden rewrites
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
fi
if has heldout; then  # 4. held-out: r_raw vs the student's rewrites (a fixed reader: the embedded model)
  for d in hotpotqa world; do
    [ $d = hotpotqa ] && S="--index ''" || S="--index $R/world_index"
    [ -f "$R/ft_$d/report.json" ] || { step "student-$d"; eval $B rewrite --config configs/rewrite/qream_icl_hotpotqa_cpu.yaml $S --qa_path "$R/${d}_heldout.jsonl" --method ft --demos_from "''" $M --model "$R/ft/final" --tokenizer "$R/ft/final" --reader_model smollm2-135m-instruct --output_dir "$R/ft_$d"; }
  done
fi
if has icl; then  # 5. QREAM-ICL on the held-out questions, and its golden rate there
  for d in hotpotqa world; do
    [ $d = hotpotqa ] && S="--index '' --seed_qa_path $H/rpt_distractor_dev_sample_train.jsonl" || S="$W"
    [ -f "$R/icl_$d/report.json" ] || { step "icl-$d"; eval $B rewrite --config configs/rewrite/qream_icl_hotpotqa_cpu.yaml $S --qa_path "$R/${d}_heldout.jsonl" --demos_from "''" $M --output_dir "$R/icl_$d"; }
    [ -f "$R/iclgold_${d}_heldout/report.json" ] || { step "icl-golden-$d"; [ $d = hotpotqa ] && S2="$Q" || S2="$Q $W"; eval $B annotate qream $S2 --qa_path "$R/${d}_heldout.jsonl" --echo_guard true --validation_fraction 0 $M --output_dir "$R/iclgold_${d}_heldout"; }
  done
fi
.venv/bin/python tests/benchmarks/qream_tables.py "$R"
