#!/usr/bin/env bash
# SFT with plain `torchrun` (DDP; no accelerate config, so no DeepSpeed: use launch/sft_local.sh or
# launch/sft_multinode_slurm.sh with configs/accelerate/zero*.yaml for ZeRO). Precision comes from the SFT
# config's own fields (e.g. bf16).
#
# usage: launch/sft_torchrun.sh CONFIG [-- extra recipe flags...]
#   CONFIG  an SFT config, e.g. configs/sft/qream_ft_llama3.2-1b.yaml
#   flags   `--field value` overrides of the SFT config
#   env     NPROC_PER_NODE (default: the visible GPUs, CUDA_VISIBLE_DEVICES respected; 1 without a GPU),
#           NNODES (1), NODE_RANK (0), MASTER_ADDR (host of node 0; required when NNODES > 1),
#           MASTER_PORT (29500), RDZV_ID (default SLURM_JOB_ID, else r3forge-sft),
#           TORCHRUN (.venv/bin/torchrun), DRY_RUN=1 prints the command without running it
# single node: torchrun --standalone --nproc_per_node N -m r3forge.sft --config CONFIG ...
# multi-node: run it on every node with the same NNODES / MASTER_ADDR / MASTER_PORT / RDZV_ID, e.g.
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=node01 launch/sft_torchrun.sh CONFIG   # on node01
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=node01 launch/sft_torchrun.sh CONFIG   # on node02
#   # or, inside a 2-node SLURM allocation (single quotes: each task reads its own SLURM_NODEID):
#   srun --ntasks-per-node=1 bash -c 'NNODES=$SLURM_NNODES NODE_RANK=$SLURM_NODEID \
#       MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1) launch/sft_torchrun.sh CONFIG'
set -euo pipefail
ME=$(basename "$0")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=launch/_lib.sh
source "$ROOT/launch/_lib.sh"

[ $# -ge 1 ] || die "usage: $ME CONFIG [-- extra recipe flags...]"
CONFIG=$1
shift
[ -f "$CONFIG" ] || die "SFT config not found: $CONFIG"
CONFIG=$(from_root "$CONFIG")
if [ "${1:-}" = -- ]; then shift; fi

cd "$ROOT"
if [ -z "${NPROC_PER_NODE:-}" ]; then
  NPROC_PER_NODE=$(visible_gpus)
  if [ "$NPROC_PER_NODE" -lt 1 ]; then NPROC_PER_NODE=1; fi
fi
NNODES=${NNODES:-1}
TORCHRUN=${TORCHRUN:-$(venv_tool torchrun)}

CMD=("$TORCHRUN" --nproc_per_node "$NPROC_PER_NODE")
if [ "$NNODES" -le 1 ]; then
  CMD+=(--standalone --nnodes 1)  # a local rendezvous on a free port
else
  [ -n "${MASTER_ADDR:-}" ] || die "NNODES=$NNODES needs MASTER_ADDR (the host of node 0)"
  CMD+=(--nnodes "$NNODES" --node_rank "${NODE_RANK:-0}" --rdzv_backend c10d
        --rdzv_endpoint "$MASTER_ADDR:${MASTER_PORT:-29500}" --rdzv_id "${RDZV_ID:-${SLURM_JOB_ID:-r3forge-sft}}")
fi
CMD+=(-m r3forge.sft --config "$CONFIG" "$@")

show_and_exec "${CMD[@]}"
