#!/usr/bin/env bash
# SFT on one machine with `accelerate launch`: CPU, one GPU, or every visible GPU of the node.
#
# usage: launch/sft_local.sh CONFIG [ACCELERATE_CONFIG] [-- extra recipe flags...]
#   CONFIG             an SFT config, e.g. configs/sft/verbal_reranker_cpu.yaml
#   ACCELERATE_CONFIG  one of configs/accelerate/*.yaml; default: cpu.yaml without a GPU (no nvidia-smi),
#                      single_gpu.yaml with one visible GPU, multi_gpu.yaml (DDP) with more
#   flags              `--field value` overrides of the SFT config, e.g. -- --num_train_epochs 1
#   env                NUM_PROCESSES (default: the visible GPUs, CUDA_VISIBLE_DEVICES respected; passed as
#                      --num_processes unless the accelerate config is a single-process one),
#                      ACCELERATE (.venv/bin/accelerate), DRY_RUN=1 prints the command without running it
# examples:
#   launch/sft_local.sh configs/sft/verbal_reranker_cpu.yaml
#   launch/sft_local.sh configs/sft/verbal_reranker_qwen2.5-3b.yaml configs/accelerate/zero3.yaml
#   CUDA_VISIBLE_DEVICES=0,1 launch/sft_local.sh configs/sft/qream_ft_llama3.2-1b.yaml -- --output_dir runs/sft/try
# Paths may be given from anywhere; the command runs from the repo root.
set -euo pipefail
ME=$(basename "$0")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=launch/_lib.sh
source "$ROOT/launch/_lib.sh"

[ $# -ge 1 ] || die "usage: $ME CONFIG [ACCELERATE_CONFIG] [-- extra recipe flags...]"
CONFIG=$1
shift
[ -f "$CONFIG" ] || die "SFT config not found: $CONFIG"
CONFIG=$(from_root "$CONFIG")
ACCEL_CONFIG=
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  ACCEL_CONFIG=$1
  shift
  [ -f "$ACCEL_CONFIG" ] || die "accelerate config not found: $ACCEL_CONFIG"
  ACCEL_CONFIG=$(from_root "$ACCEL_CONFIG")
fi
if [ "${1:-}" = -- ]; then shift; fi

cd "$ROOT"
GPUS=$(visible_gpus)
if [ -z "$ACCEL_CONFIG" ]; then
  case $GPUS in
    0) ACCEL_CONFIG=configs/accelerate/cpu.yaml ;;
    1) ACCEL_CONFIG=configs/accelerate/single_gpu.yaml ;;
    *) ACCEL_CONFIG=configs/accelerate/multi_gpu.yaml ;;
  esac
fi
NUM_PROCESSES=${NUM_PROCESSES:-$GPUS}
ACCELERATE=${ACCELERATE:-$(venv_tool accelerate)}

CMD=("$ACCELERATE" launch --config_file "$ACCEL_CONFIG")
# a distributed_type NO config (cpu/single_gpu) always runs one process: accelerate would ignore the count;
# the others get the visible GPU count instead of their own num_processes (4)
if [ "$NUM_PROCESSES" -ge 1 ] && ! grep -Eq "^distributed_type: *['\"]?NO['\"]? *$" "$ACCEL_CONFIG"; then
  CMD+=(--num_processes "$NUM_PROCESSES")
fi
CMD+=(-m r3forge.sft --config "$CONFIG" "$@")

show_and_exec "${CMD[@]}"
