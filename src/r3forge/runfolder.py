"""Run folders know their owner: `owner.json` names the command that made a folder and the settings that decide
what it holds, so no command mixes its outputs into another run's folder or overwrites them silently.

    claim_command("annotate verbal", run.output_dir, configs, run.overwrite)

The first command to use a folder writes `owner.json` (kind, settings, time, version). A later command with
the same kind and settings resumes there (the command's own resume: the synthesis caches, `resume_from_checkpoint:
auto`, ...); another kind or other settings is refused, before anything loads, with one line naming the folder,
the owner, the first settings that differ and the flag that overrides. That flag is `--overwrite true`: the old
contents move aside to the sibling `<folder>.replaced-<time>` (never deleted) and the command starts afresh.

The settings are the config fields that decide the outputs (`folder_settings`: the table, per command). Where a
run goes and how fast (`RUNTIME`: output paths, batching, concurrency, timeouts, progress bars, server
endpoints, devices, secrets) is left out, so a resume may change it; so is what a command extends in place (e.g.
`max_questions` of an annotation, whose cache grows item by item). A model is named by
`identity.model_identity` (a local folder by its content).

A folder without `owner.json` (written before owners were recorded, or a folder of the user's files) is adopted
by the first command that claims it, unless it holds files of another kind of run (`MARKERS`): that is refused
like a foreign owner. Under a distributed launch (torchrun / accelerate) only rank 0 checks, moves and writes.

A command that writes one file (`data pool`, `data filter-closed-book`, `data agent-warmstart`: `--output`)
owns no folder; `check_file` refuses a path inside another command's run folder (or a folder), before it loads.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
import json
import os
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from r3forge import __version__
from r3forge.errors import R3ForgeError
from r3forge.folder_settings import FORMAT, IDENTITY, Identity, runtime, upgraded
from r3forge.identity import model_identity

OWNER = "owner.json"
OVERRIDE = "--overwrite true"
REMEDY = f"pass {OVERRIDE} to move it aside (to <folder>.replaced-<time>) and start afresh, or choose another folder"
# files that mark a run of some kind in a folder without owner.json (a command passes those it writes itself)
MARKERS = (
    "manifest.json",
    "run.json",
    "checkpoint-*",
    "config.yaml",
    "rows.jsonl",
    "index.json",
    "state.json",
    "dataset_dict.json",
    "world.json",
    "train_info.json",
    "golden.jsonl",
    "evidence.jsonl",
    "claims.jsonl",
)


# what a command writes before it produces anything: a folder holding only these is free to claim again
SETUP = (OWNER, "config.yaml")
# kinds whose folder holds the runs and files of the commands they run (the quickstart's stages)
HOLDS_RUNS = frozenset({"quickstart"})


class RunFolderError(R3ForgeError, RuntimeError):
    """A run folder belongs to another command or to other settings: the message names both and the flag."""


def _plain(value: Any) -> Any:
    """JSON data of a config value (enums by value, paths and anything else as text)."""
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _is_model(key: str) -> bool:
    return key in ("model", "model_name_or_path") or key.endswith("_model")


def settings(configs: Iterable[Any], drop: Iterable[str] = ()) -> dict[str, Any]:
    """The owner settings of a command, merged in order: the fields of each dataclass config but the runtime
    ones, and each mapping as given (the caller chose its keys); then without `drop`. A model field holds the
    model's identity.

    >>> settings([{"batch_size": 8}, {"temperature": 0.7, "max_questions": 5}], drop=["max_questions"])
    {'batch_size': 8, 'temperature': 0.7}
    """
    merged: dict[str, Any] = {}
    for config in configs:
        if isinstance(config, Mapping):
            merged.update(config)
        else:
            fields = dataclasses.fields(config)
            merged.update({f.name: getattr(config, f.name) for f in fields if f.init and not runtime(f.name)})
    skip = set(drop)
    out = {k: _plain(v) for k, v in merged.items() if k not in skip}
    for key, value in out.items():
        if _is_model(key) and isinstance(value, str) and value:
            out[key] = _identity(value)
    return out


def _identity(model: str) -> str:
    """A local folder by its content, any other name as given (the Hub cache is not asked: a resume on a
    machine whose cache moved on is the same run)."""
    try:
        return model_identity(model, served=True)
    except OSError:  # a folder without model files: the command that loads it says so
        return model


def read_owner(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The folder's owner record, None when it has none; `RunFolderError` when unreadable."""
    path = Path(folder) / OWNER
    if not path.is_file():
        return None
    try:
        owner = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise RunFolderError(
            f"{path}: unreadable owner record ({e}); move it away to claim the folder"
        ) from None
    if not isinstance(owner, dict) or not isinstance(owner.get("settings"), dict):
        raise RunFolderError(
            f"{path}: not an owner record (no kind / settings); move it away to claim the folder"
        )
    return owner


def differences(there: Mapping[str, Any], here: Mapping[str, Any], limit: int = 3) -> str:
    """The first `limit` settings that differ, as `key: old there vs new here`, and how many more.

    >>> differences({"temperature": 0.0, "seed": 1}, {"temperature": 0.7, "seed": 1})
    'temperature: 0.0 there vs 0.7 here'
    """
    keys = [k for k in dict.fromkeys([*here, *there]) if there.get(k, "<unset>") != here.get(k, "<unset>")]
    shown = [
        f"{k}: {there.get(k, '<unset>')!r} there vs {here.get(k, '<unset>')!r} here" for k in keys[:limit]
    ]
    more = f"; {len(keys) - limit} more" if len(keys) > limit else ""
    return "; ".join(shown) + more


def _visible(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def _problem(
    folder: Path, kind: str, wanted: dict[str, Any], legacy: Iterable[str], free: Iterable[str] = ()
) -> str | None:
    """Why `kind` with `wanted` settings may not use `folder` (None: it may); the `free` settings may differ."""
    if not folder.exists():
        return None
    if not folder.is_dir():
        return "exists and is not a folder"
    owner = read_owner(folder)
    if owner is None:
        own = tuple(legacy)
        foreign = [n for n in _visible(folder) if _matches(n, MARKERS) and not _matches(n, own)]
        if foreign:
            return f"holds another run's files ({', '.join(foreign[:4])}) and no {OWNER} naming `{kind}`"
        return None
    if set(_visible(folder)) <= set(SETUP):
        return None  # claimed, but the run stopped before any output (e.g. on a bad input): free again
    if owner.get("kind") != kind:
        return f"belongs to `{owner.get('kind')}` ({OWNER}), not to `{kind}`"
    loose = set(free)
    there = {k: v for k, v in _plain(upgraded(owner)).items() if k not in loose}
    wanted = {k: v for k, v in wanted.items() if k not in loose}
    if there != wanted:
        return f"belongs to a `{kind}` run with other settings ({differences(there, wanted)})"
    return None


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _main_process() -> bool:
    return os.environ.get("RANK", "0") == "0"


def check(
    folder: str | os.PathLike[str],
    kind: str,
    wanted: dict[str, Any],
    legacy: Iterable[str] = (),
    remedy: str = REMEDY,
    free: Iterable[str] = (),
) -> None:
    """Raise `RunFolderError` unless `kind` with `wanted` settings may use `folder` (read-only: dry runs);
    `remedy` ends the message; the `free` settings may differ from the owner's."""
    out = Path(folder)
    if (problem := _problem(out, kind, _plain(wanted), legacy, free)) is not None:
        raise RunFolderError(f"{out}: {problem}; {remedy}")


def check_file(path: str | os.PathLike[str], origin: str) -> Path:
    """Refuse (`RunFolderError`, one line starting with `origin`, e.g. `flag '--output'`) a file output that
    could not be written or would land in another command's run: `path` is a folder, a folder on its way is a
    file, or a folder above it (the nearest with an `owner.json`) belongs to a run. A folder that holds runs
    (`HOLDS_RUNS`: the quickstart's) takes files right in it (a stage's output), but not its own records.
    Returns `path`. There is no override: a run's folder holds what its command wrote.

    >>> str(check_file("out/pool.jsonl", "flag '--output'"))
    'out/pool.jsonl'
    """
    out = Path(path)
    if out.is_dir():
        raise RunFolderError(f"{origin}: {out} is a folder; give the path of a file to write")
    for folder in out.absolute().parents:
        if folder.exists() and not folder.is_dir():
            raise RunFolderError(f"{origin}: {out}: {folder} is a file, not a folder")
        if (owner := read_owner(folder)) is None:
            continue
        if owner.get("kind") in HOLDS_RUNS and folder == out.absolute().parent:
            if _matches(out.name, (OWNER, *MARKERS)):
                raise RunFolderError(
                    f"{origin}: {out} would replace a record of the `{owner.get('kind')}` "
                    f"run in {folder}; choose another file name"
                )
            return out
        relative = os.path.relpath(folder)
        shown = folder if out.is_absolute() or relative.startswith(".") else relative  # not "." or "../.."
        raise RunFolderError(
            f"{origin}: {out} is inside {shown}, the run folder of `{owner.get('kind')}` ({OWNER}); "
            "write it outside that folder"
        )
    return out


def claim_command(
    command: str,
    folder: str | os.PathLike[str],
    configs: Iterable[Any],
    overwrite: bool = False,
    legacy: Iterable[str] = (),
    remedy: str = REMEDY,
    write: bool = True,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Claim `folder` for `command` with the settings of `configs` (`IDENTITY[command]` says which fields are not
    its identity), before anything loads: what every command that writes a folder calls (the quickstart claims
    with the settings its state.json records, `quickstart/plan.py: settings`). A dry run only checks.
    The rest as `claim`. Returns the settings (what `record_owner` writes for a command with `write=False`)."""
    configs = list(configs)
    rule = IDENTITY.get(command, Identity())
    wanted = settings(configs, drop=rule.leave_out)
    for key in rule.keep:
        wanted[key] = _plain(next(getattr(c, key) for c in configs if hasattr(c, key)))
    if dry_run and not overwrite:
        check(folder, command, wanted, legacy, remedy, rule.free)
    elif not dry_run:
        claim(folder, command, wanted, overwrite, legacy, remedy, write, rule.free)
    return wanted


def claim(
    folder: str | os.PathLike[str],
    kind: str,
    wanted: dict[str, Any],
    overwrite: bool = False,
    legacy: Iterable[str] = (),
    remedy: str = REMEDY,
    write: bool = True,
    free: Iterable[str] = (),
) -> Path | None:
    """Make `folder` a `kind` run with `wanted` settings; return where its old contents went, if moved.

    A folder of another kind or other settings is refused (`RunFolderError`) unless `overwrite`, which moves it
    aside; `overwrite` moves a folder of the same run aside too (a fresh start). `legacy`: file patterns this
    kind writes, so that a folder of it without owner.json is adopted. `write=False` leaves writing owner.json
    to `record_owner` (a command that builds its folder aside and renames it into place). `free`: settings
    recorded in owner.json that a later run of the folder may change (e.g. how much held-out data an
    evaluation reads): they are not compared, and owner.json is rewritten with the new values.
    """
    out = Path(folder)
    if not _main_process():
        return None
    aside = None
    if overwrite:  # a folder of the user's files (no owner, no run's files) is not moved: it is adopted
        held = out.is_dir() and any(_matches(n, (OWNER, *MARKERS)) for n in _visible(out))
        if held or (out.exists() and not out.is_dir()):
            aside = move_aside(out)
            print(f"{out}: --overwrite: its contents were moved to {aside}", file=sys.stderr)
    else:
        check(out, kind, wanted, legacy, remedy, free)
    if write:
        record_owner(out, kind, wanted)
    return aside


def record_owner(folder: str | os.PathLike[str], kind: str, wanted: dict[str, Any]) -> None:
    """Write `owner.json` (atomically) unless it already names this kind and these settings."""
    out = Path(folder)
    if not _main_process():
        return
    wanted = _plain(wanted)
    owner = read_owner(out) if out.is_dir() else None
    if owner is not None and owner.get("kind") == kind and _plain(upgraded(owner)) == wanted:
        return
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": FORMAT,
        "kind": kind,
        "settings": wanted,
        "r3forge_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    tmp = out / f".{OWNER}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, out / OWNER)


def move_aside(folder: str | os.PathLike[str]) -> Path:
    """Rename `folder` to the free sibling `<name>.replaced-<YYYYmmdd-HHMMSS>[-N]` and return it."""
    path = Path(folder).absolute()
    if path == Path.cwd() or path in Path.cwd().parents:
        raise RunFolderError(
            f"{folder}: is the working directory (or holds it); choose another output folder"
        )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside, n = path.with_name(f"{path.name}.replaced-{stamp}"), 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.replaced-{stamp}-{n}")
    path.rename(aside)
    return aside
