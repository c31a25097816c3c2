"""`r3forge quickstart`: every r3forge job once, small, in order, on a CPU; resumable; ends in REPORT.md. The
stages and their commands are in `plan.py`.

`state.json` in the run folder records each finished stage. A rerun (same config) finds the newest
unfinished `runs/quickstart-*` and resumes at its first unfinished stage; a stage that was cut off is
rerun after moving its partial output aside (`<output>.interrupted-N`), except the resumable ones
(annotation cache, trainer checkpoints), which continue in place.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from r3forge.backends.vllm_server import ServeLLMConfig, VLLMServer
from r3forge.config import parse_config, save_config
from r3forge.data.jsonio import write_json
from r3forge.errors import ConfigError, R3ForgeError
from r3forge.precision import cpu_bf16, cpu_model
from r3forge.procmem import TreePeak, descendants, gib, hwm_bytes
from r3forge.quickstart.plan import STAGE_NAMES, QuickstartConfig, build_stages, settings
from r3forge.runfolder import claim

STATE = "state.json"


class StageFailed(R3ForgeError, RuntimeError):
    """A quickstart stage exited non-zero: the message names it, its log and how to resume."""


def read_state(run: Path) -> dict:
    path = run / STATE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: unreadable quickstart state ({e}); move it away to start over") from e


def find_run(config: QuickstartConfig) -> tuple[Path, dict]:
    """(run folder, its state): run_dir, else the newest unfinished same-settings run, else a new folder."""
    if config.run_dir:
        run = Path(config.run_dir)
        state = read_state(run)
        if state and state.get("settings") != settings(config):
            diff = sorted(k for k, v in settings(config).items() if state["settings"].get(k) != v)
            raise ConfigError(
                f"run_dir: {run} was started with other settings ({', '.join(diff)}); "
                "pass the same settings, or another run_dir / --fresh true"
            )
        return run, state
    root = Path(config.output_root)
    if not config.fresh and root.is_dir():
        for run in sorted(root.glob("quickstart-*"), reverse=True):
            state = read_state(run)
            if state and not state.get("finished") and state.get("settings") == settings(config):
                return run, state
    run = root / time.strftime("quickstart-%Y%m%d-%H%M%S")
    n = 1
    while run.exists():  # another run started this second
        n += 1
        run = run.with_name(f"{run.name.split('_')[0]}_{n}")
    return run, {}


def move_aside(path: Path) -> Path | None:
    """An interrupted stage's partial output -> `<path>.interrupted-N` (kept, never deleted)."""
    if not path.exists():
        return None
    n = 1
    while (aside := path.with_name(f"{path.name}.interrupted-{n}")).exists():
        n += 1
    path.rename(aside)
    return aside


def run_command(argv: list[str], log_path: Path) -> tuple[int, dict[str, float | None]]:
    """`python -m r3forge <argv>`: output to the terminal (progress bars) and to `log_path`. Returns the exit
    code and the stage's memory: `peak_rss_gib`, the largest high-water mark of any one of its processes
    (the kernel's, read every 0.5 s), and `peak_tree_rss_gib`, the largest sum over the stage's process tree
    (sampled every 0.5 s; what an OOM killer sees when a stage starts servers or workers of its own)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log_path, "ab") as log:
        log.write(f"$ r3forge {shlex.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "r3forge", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        assert proc.stdout is not None
        try:
            with TreePeak(proc.pid) as tree:
                while chunk := os.read(proc.stdout.fileno(), 65536):
                    sys.stderr.buffer.write(chunk)
                    sys.stderr.flush()
                    log.write(chunk)
                    log.flush()  # `tail -f logs/<stage>.log` follows the stage
                proc.wait()
        except BaseException:  # Ctrl-C / SIGTERM of the quickstart: the stage goes down with it
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
        memory = {"peak_rss_gib": gib(tree.process_bytes), "peak_tree_rss_gib": gib(tree.bytes)}
        log.write(f"$ exit code {proc.returncode}, memory {json.dumps(memory)}\n".encode())
        return proc.returncode, memory


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds: the running stage and the vLLM servers are stopped


def log_tail(path: Path, lines: int = 15) -> str:
    """The last non-empty lines of a stage log (progress-bar redraws split into lines)."""
    text = path.read_text(encoding="utf-8", errors="replace").replace("\r", "\n")
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])


class Servers:
    """The teacher / student vLLM servers: started when a stage needs one, stopped when none does."""

    def __init__(self, config: QuickstartConfig, run: Path, memory: dict[str, float]) -> None:
        self.config, self.run = config, run
        self.live: dict[str, VLLMServer] = {}
        # role -> GiB, the largest over this run's sessions (kept in state.json): the sum of the server's
        # processes' high-water marks (API server + engine core) read when it stops; an upper bound of its
        # peak, since the processes need not peak at once
        self.memory = memory

    def stop(self, role: str) -> None:
        server = self.live.pop(role)
        if server.process is not None:
            marks = [m for p in descendants(server.process.pid) if (m := hwm_bytes(p)) is not None]
            if marks:
                self.memory[role] = max(self.memory.get(role, 0.0), gib(sum(marks)) or 0.0)
        server.stop()

    def model(self, role: str) -> str:
        return self.config.teacher_model if role == "teacher" else str(self.run / "reranker")

    def need(self, role: str) -> dict[str, str]:
        for other in [r for r in self.live if r != role]:
            print(f"quickstart: stopping the {other} vLLM server", file=sys.stderr)
            self.stop(other)
        if role and role not in self.live:
            print(
                f"quickstart: starting the {role} vLLM server ({self.model(role)}) on loopback",
                file=sys.stderr,
            )
            cfg = ServeLLMConfig(
                model=self.model(role),
                port=0,
                cpu_kvcache_gib=self.config.cpu_kvcache_gib,
                log_file=str(self.run / "logs" / f"vllm-{role}.log"),
            )
            self.live[role] = VLLMServer(cfg).start()
        return {f"{r}_url": s.base_url for r, s in self.live.items()}

    def close(self) -> None:
        for role in list(self.live):
            self.stop(role)


def fill(argv: tuple[str, ...], urls: dict[str, str]) -> list[str]:
    return [a.format(**urls) if "{" in a else a for a in argv]


def main(config: QuickstartConfig) -> Path:
    # deferred: the report module imports matplotlib, which the stages do not need
    from r3forge.quickstart.report import write_report

    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    run, state = find_run(config)
    resumed = bool(state.get("stages"))
    # owner.json records the very dict state.json does (`plan.settings`: models by name, as given), so the two
    # checks of a resume never disagree; which fields count is still `folder_settings.IDENTITY["quickstart"]`
    claim(run, "quickstart", settings(config), legacy=(STATE,), remedy="choose another run_dir")
    run.mkdir(parents=True, exist_ok=True)
    state = state or {
        "settings": settings(config),
        "stages": {},
        "finished": False,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    save_config([config], run / "quickstart.yaml")
    stages = build_stages(config, run)
    todo = [s for s in stages if state["stages"].get(s.name, {}).get("status") != "done"]
    verb = f"resuming at '{todo[0].name}'" if resumed and todo else "starting"
    print(
        f"quickstart: {verb} in {run} ({len(stages) - len(todo)}/{len(stages)} stages done)", file=sys.stderr
    )
    bf16, why = cpu_bf16()  # what the SFT stages' `bf16: auto` resolves to (each records it in its run.json)
    state["machine"] = {"cpu": cpu_model(), "cores": os.cpu_count(), "bf16_units": bf16, "why": why}
    print(
        f"quickstart: SFT precision (bf16: auto): {'bf16 autocast' if bf16 else 'fp32'}; {why}",
        file=sys.stderr,
    )
    t_run = time.perf_counter()
    with ExitStack() as stack:
        servers = Servers(config, run, state.setdefault("server_peak_rss_gib", {}))
        stack.callback(servers.close)
        last = STAGE_NAMES.index(config.stop_after) + 1 if config.stop_after else len(stages)
        for i, stage in enumerate(stages[:last], 1):
            record = state["stages"].get(stage.name, {})
            if record.get("status") == "done":
                continue
            print(f"\n== [{i}/{len(stages)}] {stage.name}: {stage.title}", file=sys.stderr)
            if record and not stage.resumable and stage.output and (aside := move_aside(Path(stage.output))):
                print(f"quickstart: the interrupted attempt's output was moved to {aside}", file=sys.stderr)
            state["stages"][stage.name] = {"status": "running", "attempts": record.get("attempts", 0) + 1}
            write_json(run / STATE, state)
            t0 = time.perf_counter()
            memory: dict[str, float | None] = {}
            if stage.name == "report":
                servers.close()
                write_report(run, config, stages, state)
                code = 0
            else:
                try:
                    argv = fill(stage.argv, servers.need(stage.server))
                    code, memory = run_command(argv, run / "logs" / f"{stage.name}.log")
                except (KeyboardInterrupt, SystemExit):
                    print(
                        f"\nquickstart: interrupted during '{stage.name}'; the finished stages are kept in {run}; "
                        "rerun the same command to resume",
                        file=sys.stderr,
                    )
                    raise
            seconds = round(time.perf_counter() - t0, 1)
            state["stages"][stage.name] |= memory | {
                "status": "done" if code == 0 else "failed",
                "seconds": seconds,
                "command": "r3forge " + shlex.join(stage.argv) if stage.argv else "",
            }
            write_json(run / STATE, state)
            if code != 0:
                log = run / "logs" / f"{stage.name}.log"
                raise StageFailed(
                    f"stage '{stage.name}' failed (exit code {code}) after {seconds:.0f}s; log: {log}; last lines:\n"
                    f"{log_tail(log)}\nThe outputs of the earlier stages are kept in {run}; rerun the same "
                    f"command to resume at '{stage.name}'."
                )
            print(f"== [{i}/{len(stages)}] {stage.name} done in {seconds:.0f}s", file=sys.stderr)
    if last < len(stages):
        print(
            f"quickstart: stopped after '{config.stop_after}' (stop_after); rerun to continue",
            file=sys.stderr,
        )
        return run
    state["finished"] = True
    state["seconds_this_session"] = round(time.perf_counter() - t_run, 1)
    write_json(run / STATE, state)
    print(f"\nquickstart: done; report: {run / 'REPORT.md'}", file=sys.stderr)
    return run


def cli(argv: list[str]) -> int:
    (config,) = parse_config((QuickstartConfig,), argv, prog="r3forge quickstart")
    main(config)
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
