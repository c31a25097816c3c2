#!/bin/bash
# The evidence-keeping student's learning curve: the same recipe (tests/benchmarks/bench_student_evidence.sh:
# world seed 7, rule labels of cut passages and sub-questions, 2 epochs of SFT) on more and less training data,
# each student's observations measured on the learning bench's fixed searches next to raw and the extractive
# stand-in.
#
#   bash tests/benchmarks/student_evidence_curve.sh QUICKSTART_RUN [ROOT]   # resumable
#
# SIZES (default "50 100 200") are PER_SCORE caps: 250, 500 and 1,000 training rows. ROOT/ps<N> is one student
# (~16 min of SFT per 250 rows on 2 cores, AVX2, fp32; ~8 min of observations each); a finished
# bench_student_evidence.sh run linked in as ROOT/ps200 is reused. The table and plot:
# tests/benchmarks/student_evidence_curve.py ROOT (run at the end) -> ROOT/curve.json, ROOT/curve.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
QS=${1:?usage: student_evidence_curve.sh QUICKSTART_RUN [ROOT]}
ROOT=${2:-runs/student_evidence_curve}
SIZES=${SIZES:-50 100 200}
mkdir -p "$ROOT"
for n in $SIZES; do
  echo "== $(date +%T) per score $n" >&2
  PER_SCORE=$n QUICKSTART_ARM=false bash tests/benchmarks/bench_student_evidence.sh "$QS" "$ROOT/ps$n"
done
.venv/bin/python tests/benchmarks/student_evidence_curve.py "$ROOT"
