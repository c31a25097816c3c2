#!/usr/bin/env bash
# Sharded teacher annotation on a SLURM cluster: one array task per node, each node serves the teacher with
# vLLM (tensor parallel over its GPUs) and annotates its shard i/N of the pairs; merge when all are done.
#
# usage: sbatch --array=0-$((N-1)) --nodes=1 --gpus-per-node=4 launch/annotate_slurm.sh CONFIG [flags...]
#   CONFIG  an annotation config, e.g. configs/annotate/verbal_nq_gptoss120b.yaml (its `model` is served)
#   flags   more `r3forge annotate verbal` flags (they override the config)
#   env     SHARDS (N, default SLURM_ARRAY_TASK_COUNT), SHARD (i, default SLURM_ARRAY_TASK_ID),
#           OUT (runs/annotate/<config name>), TP (tensor parallel size, default 4), PORT (8000),
#           MODEL (default: the config's `model`), SUBCOMMAND (verbal | paraphrase | judge; default verbal),
#           SERVE_ARGS (extra `vllm serve` flags), PYTHON (.venv/bin/python),
#           DRY_RUN=1 prints the two commands and exits
# then: r3forge synth merge --inputs $OUT/s* --output_dir $OUT/all [--push-to-hub org/name]
# Before submitting: `mkdir -p logs` (SLURM opens --output below before this script runs), and a retriever at
# the config's `retriever_url` on every node (`r3forge serve retriever`), or pass --retriever_url. Resubmitting
# some tasks only (--array=2) changes SLURM_ARRAY_TASK_COUNT: set SHARDS to the original N.
#
#SBATCH --job-name=r3forge-annotate
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --output=logs/%x-%A_%a.out
set -euo pipefail
ME=launch/annotate_slurm.sh  # under sbatch, $0 is a copy in SLURM's spool directory
ROOT=${SLURM_SUBMIT_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
# shellcheck source=launch/_lib.sh
source "$ROOT/launch/_lib.sh"
cd "$ROOT"
CONFIG=${1:?usage: launch/annotate_slurm.sh CONFIG [flags...]}
shift
PYTHON=${PYTHON:-$(venv_tool python)}
SHARDS=${SHARDS:-${SLURM_ARRAY_TASK_COUNT:-1}}
SHARD=${SHARD:-${SLURM_ARRAY_TASK_ID:-0}}
NAME=$(basename "$CONFIG" .yaml)
OUT=${OUT:-runs/annotate/$NAME}
TP=${TP:-4}
PORT=${PORT:-8000}
SUBCOMMAND=${SUBCOMMAND:-verbal}
MODEL=${MODEL:-$("$PYTHON" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["model"])' "$CONFIG")}

SERVE=(env PORT="$PORT" HOST=127.0.0.1 launch/serve_vllm.sh "$MODEL" --tensor-parallel-size "$TP")
# shellcheck disable=SC2206  # SERVE_ARGS is a flag list on purpose
SERVE+=(${SERVE_ARGS:-})
ANNOTATE=("$PYTHON" -m r3forge annotate "$SUBCOMMAND" --config "$CONFIG" --shard "$SHARD/$SHARDS"
          --output_dir "$OUT/s$SHARD" --base_url "http://127.0.0.1:$PORT/v1" --progress false "$@")

echo "+ $(printf '%q ' "${SERVE[@]}") &" >&2
echo "+ $(printf '%q ' "${ANNOTATE[@]}")" >&2
if [ "${DRY_RUN:-0}" = 1 ]; then exit 0; fi

mkdir -p logs "$OUT"
"${SERVE[@]}" > "logs/vllm-$NAME-s$SHARD.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true' EXIT
for _ in $(seq 1 180); do  # a 120B model takes minutes to load
  if curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; then break; fi
  if ! kill -0 "$SERVER" 2>/dev/null; then
    echo "vLLM server exited; see logs/vllm-$NAME-s$SHARD.log" >&2
    exit 1
  fi
  sleep 10
done
curl -sf "http://127.0.0.1:$PORT/health" > /dev/null || { echo "vLLM server not healthy after 30 min" >&2; exit 1; }
"${ANNOTATE[@]}"
