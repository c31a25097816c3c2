"""The GPU check's fixtures and its summary (`make test-gpu`; the checks are in test_gpu.py).

- `gpu_world`: a small synthetic world, its BM25 index and format warm-start rows, made in this process with
  the same `r3forge` command lines a user types (CPU work, seconds);
- `sft_command` / `grpo_command`: the `r3forge sft|grpo` command lines the checks run, each in its own process
  (its own CUDA context; GRPO's colocated vLLM engine lives and dies with it);
- `sft_run` / `grpo_run`: the bf16 SFT run (the SFT check reads it, GRPO starts from its final/) and the
  GRPO run;
- the summary: after the run, one line per `gpu` check (name, figure, PASS / FAIL / SKIP with the reason) and
  the total time against the 8-minute budget (over it: exit status 1).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from r3forge.cli import main as r3forge

REPO = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m-instruct"
BUDGET_S = 480.0  # the whole check on one H100/H200
SFT_STEPS = 16  # 2 epochs of the ~63 warm-start rows at 8 rows a step
GRPO_STEPS = 2
REPORTS = pytest.StashKey[list]()


def load_module(relpath: str) -> ModuleType:
    """A file of this repository (a benchmark script, another test folder's module) loaded as a module."""
    path = REPO / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# the parity tests' own requests (a session fixture of tests/backends/conftest.py), reused as they are
parity_requests = load_module("tests/backends/conftest.py").parity_requests


@pytest.fixture(scope="session")
def repo_module() -> Callable[[str], ModuleType]:
    """`repo_module("tests/benchmarks/bench_igp_probes.py")`: a repository file as a module (loaded on use,
    so that vLLM is imported only by the checks that need it)."""
    return load_module


@pytest.fixture(scope="session")
def gpu_world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """World (seed 0, ~300 passages, 80 questions: 64 train, 16 held out), BM25 index, warm-start rows (one
    raw 20-word document per search, as the quickstart writes them). Paths: root, questions (jsonl),
    hf_questions (10 graded passages each, for the benchmarks), index, warmstart, logs."""
    root = tmp_path_factory.mktemp("gpu_check")
    world = root / "world"
    w = {"root": root, "questions": world / "questions.jsonl", "hf_questions": world / "hf" / "questions",
         "index": root / "index", "warmstart": root / "warmstart.jsonl", "logs": root / "logs"}  # fmt: skip
    w["logs"].mkdir()
    commands = [
        ["data", "synth-world", "--seed", 0, "--num_passages", 300, "--num_questions", 80,
         "--output_dir", world],
        ["index", "build", "--corpus", world / "corpus.jsonl", "--kind", "bm25", "--output", w["index"]],
        ["data", "agent-warmstart", "--dataset", w["questions"], "--index", w["index"], "--observation",
         "raw", "--num_shown", 1, "--doc_max_words", 20, "--max_questions", 64, "--output", w["warmstart"]],
    ]  # fmt: skip
    for argv in commands:
        argv = [str(a) for a in argv]
        assert r3forge(argv) == 0, f"r3forge {shlex.join(argv)} failed"
    return w


@pytest.fixture(scope="session")
def sft_command(gpu_world: dict[str, Path]) -> list[str]:
    """The format warm start of the CPU recipe (configs/sft/agent_warmstart_cpu.yaml) as written, except:
    bf16 on the GPU, SFT_STEPS steps of 8 rows, a loss logged every step."""
    w = gpu_world
    argv = ["sft", "--config", REPO / "configs" / "sft" / "agent_warmstart_cpu.yaml",
            "--dataset", w["warmstart"], "--model_name_or_path", MODEL, "--output_dir", w["root"] / "sft",
            "--bf16", "true", "--use_cpu", "false", "--max_steps", SFT_STEPS,
            "--per_device_train_batch_size", 8, "--gradient_accumulation_steps", 1, "--logging_steps", 1,
            "--report_to", "none"]  # fmt: skip
    return [str(a) for a in argv]


@pytest.fixture(scope="session")
def grpo_command(gpu_world: dict[str, Path]) -> list[str]:
    """The CPU GRPO recipe (configs/grpo/agent_world_cpu.yaml: G = 4, 8 rollouts a step, 2 search turns,
    verbal observations) from the SFT run's final/, except: the embedded model as the verbal reranker (served
    by vLLM here in 0.15 of the GPU), bf16, and TRL's colocated vLLM engine for the rollouts in 0.3 of the GPU
    (TRL's default) with sleep mode on, as the paper config runs it, a 2048-token context."""
    w = gpu_world
    argv = ["grpo", "--config", REPO / "configs" / "grpo" / "agent_world_cpu.yaml",
            "--dataset", w["questions"], "--index", w["index"], "--reranker_model", "smollm2-135m-instruct",
            "--reranker_serve", "true", "--reranker_gpu_memory_utilization", 0.15,
            "--model_name_or_path", w["root"] / "sft" / "final", "--output_dir", w["root"] / "grpo",
            "--max_steps", GRPO_STEPS, "--save_strategy", "no", "--bf16", "true", "--use_cpu", "false",
            "--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_gpu_memory_utilization", 0.3,
            "--vllm_enable_sleep_mode", "true", "--vllm_max_model_length", 2048, "--report_to", "none"]  # fmt: skip
    return [str(a) for a in argv]


def run_job(argv: list[str], log: Path, timeout_s: float) -> None:
    """`python -m r3forge <argv>` in its own process from the repository root, its output in `log`; a non-zero
    exit raises with the log's last lines."""
    with open(log, "w", encoding="utf-8") as f:
        f.write(f"$ r3forge {shlex.join(argv)}\n")
        f.flush()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        code = subprocess.run([sys.executable, "-m", "r3forge", *argv], cwd=REPO, stdout=f, env=env,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout_s,
                              check=False).returncode  # fmt: skip
    if code != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:])
        raise AssertionError(f"r3forge {argv[0]} exited with {code} (log: {log}); last lines:\n{tail}")


@pytest.fixture(scope="session")
def sft_run(gpu_world: dict[str, Path], sft_command: list[str]) -> Path:
    """The bf16 SFT run folder (metrics.jsonl, final/)."""
    run_job(sft_command, gpu_world["logs"] / "sft.log", timeout_s=300)
    return gpu_world["root"] / "sft"


@pytest.fixture(scope="session")
def grpo_run(gpu_world: dict[str, Path], grpo_command: list[str], sft_run: Path) -> Path:
    """The GRPO run folder (config.yaml, metrics.jsonl, rollouts.jsonl, final/), from the SFT run's final/."""
    run_job(grpo_command, gpu_world["logs"] / "grpo.log", timeout_s=420)
    return gpu_world["root"] / "grpo"


# ----------------------------------------------------------------------------------------------- summary


def summary_line(check: str, status: str, figure: str = "", reason: str = "") -> str:
    """One line of the GPU check's summary.

    >>> summary_line("bench annotate pipeline/sequential", "PASS", "7.1x (goal >= 6x)")
    'bench annotate pipeline/sequential 7.1x (goal >= 6x) PASS'
    >>> summary_line("bf16 SFT", "SKIP", reason="no CUDA device")
    'bf16 SFT SKIP (no CUDA device)'
    >>> summary_line("bench IGP probes batched/one-by-one", "FAIL", "3.2x (goal >= 5x)", "assert 3.2 >= 5")
    'bench IGP probes batched/one-by-one 3.2x (goal >= 5x) FAIL (assert 3.2 >= 5)'
    """
    return " ".join(part for part in (check, figure, status, f"({reason})" if reason else "") if part)


def _reason(report: pytest.TestReport) -> str:
    """A skip's reason, or the first line of a failure's error."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, "Skipped: reason")
        return longrepr[2].removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr)
    lines = [line for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else "error")[:200]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Keep each phase's report of a `gpu` check, under the check's name (its docstring's first line)."""
    report = yield
    if item.get_closest_marker("gpu") is not None:
        doc = getattr(getattr(item, "function", None), "__doc__", None) or item.name
        item.config.stash.setdefault(REPORTS, []).append((doc.strip().splitlines()[0], report))
    return report


def summary(reports: list[tuple[str, pytest.TestReport]]) -> tuple[list[str], float, bool]:
    """(one line per check in run order, seconds of all their phases, whether any check ran).

    >>> def phase(outcome, when="call", longrepr=None, figure=()):
    ...     return pytest.TestReport("t", ("t", 0, "t"), {}, outcome, longrepr, when, duration=60.0,
    ...                              user_properties=[("figure", f) for f in figure])
    >>> summary([("bf16 SFT", phase("passed", "setup")), ("bf16 SFT", phase("passed", figure=["2 -> 1"])),
    ...          ("bench IGP", phase("failed", longrepr="assert 3.2 >= 5.0\\nwhere ...")),
    ...          ("GRPO", phase("skipped", "setup", ("t", 1, "Skipped: no CUDA")))])
    (['bf16 SFT 2 -> 1 PASS', 'bench IGP FAIL (assert 3.2 >= 5.0)', 'GRPO SKIP (no CUDA)'], 240.0, True)
    """
    checks: dict[str, list[pytest.TestReport]] = {}
    for check, report in reports:
        checks.setdefault(check, []).append(report)
    lines, seconds, ran = [], 0.0, False
    for check, phases in checks.items():
        figure = next((v for r in phases for k, v in r.user_properties if k == "figure"), "")
        failed = next((r for r in phases if r.failed), None)
        skipped = next((r for r in phases if r.skipped), None)
        if failed is not None:
            lines.append(summary_line(check, "FAIL", figure, _reason(failed)))
        elif skipped is not None:
            lines.append(summary_line(check, "SKIP", figure, _reason(skipped)))
        else:
            lines.append(summary_line(check, "PASS", figure))
        ran = ran or skipped is None
        seconds += sum(r.duration for r in phases)
    return lines, seconds, ran


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    reports = config.stash.get(REPORTS, [])
    if not reports:  # no gpu check selected (the default suite)
        return
    lines, seconds, ran = summary(reports)
    terminalreporter.section("r3forge GPU check")
    for line in lines:
        terminalreporter.write_line(line)
    if ran:
        status = "PASS" if seconds < BUDGET_S else "FAIL"
        terminalreporter.write_line(f"total {seconds:.0f} s (goal < {BUDGET_S:.0f} s) {status}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Over the time budget is a failure of the check, even when every check passed."""
    reports = session.config.stash.get(REPORTS, [])
    _, seconds, ran = summary(reports) if reports else ([], 0.0, False)
    if ran and seconds >= BUDGET_S and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
