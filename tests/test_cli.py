import dataclasses
import importlib
import json
import pkgutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import r3forge
from r3forge.cli import COMMANDS, main
from r3forge.config import missing_help
from r3forge.data.records import split_flashrag_contents


def r3forge_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "r3forge", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_help_lists_every_command_with_a_description():
    out = r3forge_cli("--help")
    assert out.returncode == 0
    for name, (desc, _) in COMMANDS.items():
        assert f"  {name}" in out.stdout and desc in out.stdout


def test_every_command_resolves_to_a_function_in_the_package_that_owns_it():
    for name, (_, entry) in COMMANDS.items():
        for spec in [entry] if isinstance(entry, str) else [spec for spec, _ in entry.values()]:
            module, func = spec.split(":")
            assert callable(getattr(importlib.import_module(module), func)), f"{name}: {spec}"
    assert COMMANDS["data"][1]["filter-closed-book"][0].startswith("r3forge.agent.")
    assert COMMANDS["annotate"][1]["qream"][0].startswith("r3forge.qream.")


def test_help_imports_no_torch():
    code = (
        "import sys; from r3forge.cli import main; main(['--help']); main(['eval', '--help']); "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "False False"


def test_unknown_command_and_flag_are_clear_errors(capsys):
    assert main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err
    assert main(["data", "synth-world", "--sed", "1"]) == 1
    assert "unknown flag '--sed' (did you mean '--seed'?)" in capsys.readouterr().err
    assert main(["data", "show", "--path", "/no/such/file.jsonl"]) == 1
    assert "no such data file: /no/such/file.jsonl" in capsys.readouterr().err
    assert main(["eval", "ragg"]) == 2
    assert "unknown subcommand 'ragg'" in capsys.readouterr().err


def test_subcommand_help():
    for command in ("models", "data"):
        out = r3forge_cli(command, "--help")
        assert out.returncode == 0 and "subcommands:" in out.stdout
    out = r3forge_cli("data", "synth-world", "--help")
    assert out.returncode == 0 and "--num_passages" in out.stdout and "Approximate" in out.stdout


def test_synth_world_writes_corpus_and_questions(tmp_path: Path):
    out = r3forge_cli("data", "synth-world", "--seed", "0", "--output_dir", str(tmp_path / "w"))
    assert out.returncode == 0, out.stderr
    corpus = [json.loads(line) for line in (tmp_path / "w" / "corpus.jsonl").read_text().splitlines()]
    questions = [json.loads(line) for line in (tmp_path / "w" / "questions.jsonl").read_text().splitlines()]
    assert 1700 <= len(corpus) <= 2300 and len(questions) == 500
    assert all(split_flashrag_contents(c["contents"])[0] for c in corpus)
    assert all(q["golden_answers"] and q["metadata"]["gold_passage_ids"] for q in questions)


def _config_dataclasses():
    for info in pkgutil.walk_packages(r3forge.__path__, "r3forge."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and dataclasses.is_dataclass(obj)
                and obj.__module__ == info.name
                and obj.__name__.endswith("Config")
            ):
                yield obj


@pytest.mark.parametrize(
    "config_cls",
    sorted(set(_config_dataclasses()), key=lambda c: c.__qualname__),
    ids=lambda c: c.__qualname__,
)
def test_every_config_field_has_help(config_cls):
    assert missing_help(config_cls) == []


SIGTERMED = """
import sys, time
from pathlib import Path
from r3forge.cli import exit_on_sigterm
exit_on_sigterm()
try:
    print("ready", flush=True)
    time.sleep(60)
finally:
    Path(sys.argv[1]).write_text("cleaned up")
"""


def test_sigterm_runs_cleanup_and_exits_143(tmp_path: Path):
    """SIGTERM (a scheduler's cancel) unwinds like Ctrl-C: `finally` and `with` blocks run (servers stop)."""
    marker = tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, "-c", SIGTERMED, str(marker)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 143
    assert marker.read_text() == "cleaned up"
