"""Where a result file's figures came from: the command, the commit, the date, the machine and what ran beside.

A benchmark or quality script ends with

    write_result(path, figures, tables, beside=args.beside)

`figures` are its raw numbers, `tables` the cells it formatted itself (`render_tables.py` prints them into
the guides, so a guide never holds a figure typed by hand), and `provenance` says how to make them again:

    {"command": ".venv/bin/python tests/benchmarks/x.py ...", "commit": "<sha>", "dirty": false,
     "date": "2026-12-07T22:40:00+00:00", "machine": {"cpu": "AMD EPYC", "flags": [...], "cores": 2,
     "torch_threads": 2}, "beside": "nothing"}

`beside` is what the measuring script cannot see: the other jobs that shared the cores. A timing script takes
it as a flag (`--beside`), and its default, "not recorded", is written as such rather than guessed.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from r3forge.data.jsonio import write_json
from r3forge.precision import BF16_FLAGS, cpu_flags, cpu_model

ROOT = Path(__file__).resolve().parents[2]
# the flags that decide a CPU timing here: vector width and bf16 units (see r3forge.precision)
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "bf16", "asimd", "sve")
NOT_RECORDED = "not recorded"


def machine() -> dict[str, Any]:
    """The CPU model, its speed-relevant flags, the cores this process may use and torch's thread count.

    >>> sorted(machine())
    ['cores', 'cpu', 'flags', 'torch_threads']
    """
    import torch  # only here: a result file of a script that never imports torch still names the machine

    return {
        "cpu": cpu_model(),
        "flags": sorted(cpu_flags() & set(FLAGS)),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }


def cpu_kind(cpu: str | None = None, bf16_flags: list[str] | None = None) -> str:
    """A file name for one CPU kind: its model and its bf16 units (default: this machine's), for timing results
    kept one file per kind (`results/<bench>/<cpu kind>.json`).

    >>> cpu_kind("AMD EPYC", ["avx512_bf16"]), cpu_kind("Intel(R) Xeon(R) Platinum 8480+", [])
    ('amd-epyc_avx512_bf16', 'intel-r-xeon-r-platinum-8480_no-bf16')
    """
    cpu = cpu_model() if cpu is None else cpu
    bf16_flags = sorted(cpu_flags() & set(BF16_FLAGS)) if bf16_flags is None else bf16_flags
    model = re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-")
    return f"{model}_{'_'.join(bf16_flags) or 'no-bf16'}"


def command(argv: list[str] | None = None) -> str:
    """The command line that ran this script, as typed from the repository root.

    >>> command(["/work/r3forge/tests/benchmarks/x.py", "--n", "3"]).endswith("x.py --n 3")
    True
    """
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0])
    if script.is_absolute() and script.is_relative_to(ROOT):
        script = script.relative_to(ROOT)
    return shlex.join([".venv/bin/python", str(script), *argv[1:]])


def commit() -> tuple[str, bool]:
    """(HEAD's sha, whether tracked files differ from it); ("unknown", True) outside a git checkout."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
        diff = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT, capture_output=True, check=False)
    except (OSError, subprocess.CalledProcessError):
        return "unknown", True
    return sha.stdout.strip(), diff.returncode != 0


def provenance(beside: str = NOT_RECORDED, argv: list[str] | None = None) -> dict[str, Any]:
    """The provenance block of a result file (see the module docstring)."""
    sha, dirty = commit()
    return {
        "command": command(argv),
        "commit": sha,
        "dirty": dirty,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "beside": beside or NOT_RECORDED,
    }


def write_result(
    path: Path, figures: dict[str, Any], tables: dict[str, dict], beside: str = NOT_RECORDED
) -> None:
    """Write `figures`, `tables` and the provenance to `path` (JSON, atomically)."""
    for name, table in tables.items():
        if not {"columns", "rows"} <= set(table):
            raise ValueError(f"{path}: table {name!r} needs 'columns' and 'rows' (has {sorted(table)})")
    write_json(path, figures | {"tables": tables, "provenance": provenance(beside)})


def add_tables(path: Path, tables: dict[str, dict]) -> None:
    """Put `tables`, formatted by the measuring script from the file's own figures, into an existing result file.

    For result files written before they carried tables: nothing is measured again. A file without provenance
    gets one that says so (its command, machine and date are then only in the guide's text and the notes).
    """
    path = Path(path)
    result = json.loads(path.read_text(encoding="utf-8"))
    sha, dirty = commit()
    result["tables"] = tables
    result.setdefault(
        "provenance", {"command": NOT_RECORDED, "note": "measured before result files carried provenance"}
    )
    result["provenance"]["tables_rendered"] = {
        "command": command(),
        "commit": sha,
        "dirty": dirty,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    write_json(path, result)
