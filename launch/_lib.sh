# Helpers shared by the launch scripts (sourced, not run). The sourcing script sets ME (its name in
# messages) and ROOT (the repository root) first.

die() { echo "$ME: $*" >&2; exit 2; }

# an existing file's path, relative to the repo root when it lies inside it (the commands run there)
from_root() { local p; p="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; echo "${p#"$ROOT"/}"; }

# a tool of the repo's virtualenv when there is one, else the one on PATH (call it from the repo root):
# ACCELERATE=${ACCELERATE:-$(venv_tool accelerate)}
venv_tool() {
  if [ -x ".venv/bin/$1" ]; then echo ".venv/bin/$1"
  elif [ "$1" = python ]; then command -v python3
  else echo "$1"; fi
}

# visible GPUs: none without nvidia-smi; else CUDA_VISIBLE_DEVICES when set (""/-1 = none), else nvidia-smi -L
visible_gpus() {
  if ! command -v nvidia-smi > /dev/null; then
    echo 0
  elif [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    local ids
    case $CUDA_VISIBLE_DEVICES in
      "" | -1) echo 0 ;;
      *) IFS=, read -ra ids <<< "$CUDA_VISIBLE_DEVICES"; echo "${#ids[@]}" ;;
    esac
  else
    { nvidia-smi -L 2> /dev/null || true; } | grep -c '^GPU' || true
  fi
}

# print the command (shell-quoted) to stderr; DRY_RUN=1 stops there, else the command replaces the shell
show_and_exec() {
  echo "+ $(printf '%q ' "$@")" >&2
  if [ "${DRY_RUN:-0}" = 1 ]; then exit 0; fi
  exec "$@"
}
