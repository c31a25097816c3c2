#!/usr/bin/env bash
# Multi-node SFT on a SLURM cluster: one `srun` task per node, each running `accelerate launch` for its
# GPUs; the nodes meet through a c10d rendezvous on the first host of the allocation.
#
# usage: sbatch [--nodes=N] [--gpus-per-node=G] launch/sft_multinode_slurm.sh CONFIG [ACCELERATE_CONFIG] [-- flags...]
#   CONFIG             an SFT config, e.g. configs/sft/verbal_reranker_qwen2.5-3b.yaml
#   ACCELERATE_CONFIG  default configs/accelerate/zero3.yaml (zero2/zero3/zero3_offload use the `standard`
#                      DeepSpeed multi-node launcher = torchrun per node; multi_gpu.yaml = plain DDP)
#   flags              `--field value` overrides of the SFT config; the global batch is per-device batch x
#                      grad-accum x all GPUs, so on 2 nodes x 4 GPUs keep the paper's 128 with
#                      -- --gradient_accumulation_steps 4
#   env                GPUS_PER_NODE (default SLURM_GPUS_ON_NODE, else SLURM_GPUS_PER_NODE, else 4),
#                      MAIN_PROCESS_IP (default: the first host of SLURM_JOB_NODELIST), MAIN_PROCESS_PORT
#                      (29500), ACCELERATE (.venv/bin/accelerate), DRY_RUN=1 prints the commands and exits
#                      (the per-node one for SLURM_NODEID; no srun/scontrol needed), MODULE (the recipe
#                      module, default r3forge.sft; r3forge.agent.grpo for the GRPO agent)
# Submit from the repo root (paths are relative to it) after `mkdir -p logs` (SLURM does not create it).
# The recipe's output_dir must be on a filesystem all nodes share.
#
#SBATCH --job-name=r3forge-sft
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=32
#SBATCH --exclusive
#SBATCH --time=24:00:00
#SBATCH --output=logs/%x-%j.out
set -euo pipefail
ME=launch/sft_multinode_slurm.sh  # under sbatch, $0 is a copy in SLURM's spool directory
ROOT=${SLURM_SUBMIT_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
# shellcheck source=launch/_lib.sh
source "$ROOT/launch/_lib.sh"

# first host of a SLURM nodelist: `scontrol show hostnames` when there is one, else "a,b" -> a,
# "node[01-04,07],x" -> node01 (one bracket group; set MAIN_PROCESS_IP for anything fancier)
first_host() {
  local hosts head prefix range
  hosts=$(scontrol show hostnames "$1" 2> /dev/null || true)
  if [ -n "$hosts" ]; then echo "${hosts%%$'\n'*}"; return; fi
  head=${1%%,*}
  case $head in
    *\[*) prefix=${1%%\[*}; range=${1#*\[}; range=${range%%\]*}; range=${range%%,*}; echo "$prefix${range%%-*}" ;;
    *) echo "$head" ;;
  esac
}

[ $# -ge 1 ] || die "usage: sbatch $ME CONFIG [ACCELERATE_CONFIG] [-- extra recipe flags...]"
CONFIG=$1
shift
[ -f "$CONFIG" ] || die "SFT config not found: $CONFIG"
CONFIG=$(from_root "$CONFIG")
ACCEL_CONFIG=configs/accelerate/zero3.yaml
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  [ -f "$1" ] || die "accelerate config not found: $1"
  ACCEL_CONFIG=$(from_root "$1")
  shift
fi
if [ "${1:-}" = -- ]; then shift; fi
cd "$ROOT"
[ -f "$ACCEL_CONFIG" ] || die "accelerate config not found: $ROOT/$ACCEL_CONFIG (submit from the repo root)"

NNODES=${SLURM_NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-${SLURM_GPUS_PER_NODE:-4}}}
GPUS_PER_NODE=${GPUS_PER_NODE##*:}  # SLURM_GPUS_PER_NODE may read "h100:4"
NODELIST=${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-localhost}}
MAIN_PROCESS_IP=${MAIN_PROCESS_IP:-$(first_host "$NODELIST")}
MAIN_PROCESS_PORT=${MAIN_PROCESS_PORT:-29500}
ACCELERATE=${ACCELERATE:-$(venv_tool accelerate)}

# every node runs HEAD --machine_rank <its SLURM_NODEID> TAIL
HEAD=("$ACCELERATE" launch --config_file "$ACCEL_CONFIG"
      --num_machines "$NNODES" --num_processes "$((NNODES * GPUS_PER_NODE))")
TAIL=(--main_process_ip "$MAIN_PROCESS_IP" --main_process_port "$MAIN_PROCESS_PORT" --rdzv_backend c10d
      -m "${MODULE:-r3forge.sft}" --config "$CONFIG" "$@")
# the escaped "$SLURM_NODEID" is expanded by each srun task, not here
NODE_SCRIPT="$(printf '%q ' "${HEAD[@]}")--machine_rank \"\$SLURM_NODEID\" $(printf '%q ' "${TAIL[@]}")"
SRUN=(srun --nodes="$NNODES" --ntasks-per-node=1 --kill-on-bad-exit=1)
# since SLURM 22.05 srun no longer inherits --cpus-per-task: without it each task would get one core
if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then SRUN+=(--cpus-per-task="$SLURM_CPUS_PER_TASK"); fi
RANK=${SLURM_NODEID:-${SLURM_PROCID:-0}}

echo "+ ${SRUN[*]} bash -c '$NODE_SCRIPT'" >&2
echo "+ $(printf '%q ' "${HEAD[@]}" --machine_rank "$RANK" "${TAIL[@]}")" >&2  # what node $RANK runs
if [ "${DRY_RUN:-0}" = 1 ]; then exit 0; fi

command -v srun > /dev/null || { echo "$ME: srun not found: submit with sbatch (DRY_RUN=1 to print)" >&2; exit 1; }
exec "${SRUN[@]}" bash -c "$NODE_SCRIPT"
