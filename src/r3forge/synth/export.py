"""Synthesis output as `datasets`: load, merge shard folders, Parquet + dataset card, push to the Hub.

A folder exported by `export_dataset` (done by an unsharded `run_step` and by `merge_shards`) reads like a
Hub dataset repo:

    manifest.json  {accepted,rejected,failed,faults}-*.jsonl    the store (source of truth)
    data/train-00000-of-00001.parquet                       accepted records, one column per output field
    rejected/train-00000-of-00001.parquet                   rejected records (the "rejected" config)
    README.md                                               the card: counts, histograms, reject reasons
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
from huggingface_hub import HfApi

from r3forge import __version__
from r3forge.synth.store import (
    FAILED,
    FAULTS,
    KINDS,
    MANIFEST,
    STORE_FORMAT,
    ShardSpec,
    SynthError,
    check_identity,
    iter_records,
    read_faults,
    read_manifest,
    record_files,
    write_manifest,
)

ACCEPTED_PARQUET = "data/train-00000-of-00001.parquet"
REJECTED_PARQUET = "rejected/train-00000-of-00001.parquet"
# store fields that are nested or heterogeneous: JSON strings in the Dataset
JSON_COLUMNS = ("sampling",)
MAX_LEVELS = 10  # int/bool output columns with at most this many values get a value-count table


@dataclass
class HubConfig:
    push_to_hub: str = field(default="", metadata={"help": "Hub dataset repo id to upload the export to."})
    hub_endpoint: str = field(
        default="", metadata={"help": "Hub URL; empty: $HF_ENDPOINT or huggingface.co."}
    )
    hub_token: str = field(default="", metadata={"help": "Hub token; empty: $HF_TOKEN or the cached login."})
    hub_private: bool = field(default=False, metadata={"help": "Create the repo as private."})


def records_to_dataset(records: Iterable[dict[str, Any]]) -> datasets.Dataset:
    """Store records -> Dataset: `key`, the parsed output's fields as columns, then the metadata columns."""
    rows = []
    for record in records:
        row = {"key": record["key"], **record.get("output", {})}
        row |= {k: v for k, v in record.items() if k not in ("key", "output")}
        for name in JSON_COLUMNS:
            if name in row:
                row[name] = json.dumps(row[name], sort_keys=True)
        rows.append(row)
    columns = list(dict.fromkeys(k for row in rows for k in row)) or ["key"]
    return datasets.Dataset.from_dict({c: [row.get(c) for row in rows] for c in columns})


def load_accepted(root: str | os.PathLike[str]) -> datasets.Dataset:
    """The accepted records of an output folder (all its shard files) as a Dataset."""
    return records_to_dataset(iter_records([Path(root)], "accepted"))


def load_rejected(root: str | os.PathLike[str]) -> datasets.Dataset:
    """The rejected records of an output folder as a Dataset (`reason`, `detail`, raw output, ...)."""
    return records_to_dataset(iter_records([Path(root)], "rejected"))


def rejected_keys(root: str | os.PathLike[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(the step's `key()` of the input, the record) for every rejected record of an output folder; the key
    comes back as a dict whether the Dataset holds it as a struct or as a JSON string."""
    out = []
    for row in load_rejected(root):
        key = row["input"] if isinstance(row["input"], dict) else json.loads(row["input"])
        out.append((key, row))
    return out


def export_dataset(root: str | os.PathLike[str]) -> Path:
    """Write the folder's accepted (and rejected) records as Parquet, and the dataset card `README.md`."""
    root = Path(root)
    manifest = read_manifest(root)
    if manifest is None:
        raise SynthError(f"{root}: no {MANIFEST}; not a synthesis output folder")
    accepted, rejected = load_accepted(root), load_rejected(root)
    bars = not datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        for ds, rel in ((accepted, ACCEPTED_PARQUET), (rejected, REJECTED_PARQUET)):
            path = root / rel
            if len(ds) == 0 and rel == REJECTED_PARQUET:
                path.unlink(missing_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            ds.to_parquet(str(tmp))
            os.replace(tmp, path)
    finally:
        if bars:
            datasets.enable_progress_bars()
    tmp = root / ".README.md.tmp"
    tmp.write_text(dataset_card(manifest, accepted, rejected), encoding="utf-8")
    os.replace(tmp, root / "README.md")
    return root


def merge_shards(
    dirs: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str], overwrite: bool = False
) -> Path:
    """Combine shard output folders into `out_dir` (dropping duplicate keys), then export Parquet + card.

    The folders must hold the same step, prompt version and model (else `SynthError`). The merged folder
    is a store of shard 0/1, so `run_step` can resume into it (e.g. to fill in a missing shard).
    """
    roots = [Path(d) for d in dirs]
    if not roots:
        raise SynthError("merge: no input folders")
    manifests = []
    for root in roots:
        manifest = read_manifest(root)
        if manifest is None or manifest.get("format") != STORE_FORMAT:
            raise SynthError(f"{root}: no {STORE_FORMAT} {MANIFEST}; not a synthesis output folder")
        check_identity(manifest, (manifests or [manifest])[0], f"merge: {root / MANIFEST}", str(roots[0]))
        manifests.append(manifest)
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and (not overwrite or read_manifest(out) is None):
        raise SynthError(
            f"{out}: exists and is not empty; pass overwrite=True (--overwrite) for a merged folder"
        )
    covered, incomplete = _coverage(manifests)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        tag = ShardSpec().tag
        counts, reasons, keys = Counter(), {"rejected": Counter(), FAILED: Counter()}, set()
        for kind in (*KINDS, FAILED):  # failed: the items not done in any folder
            with open(tmp / f"{kind}-{tag}.jsonl", "w", encoding="utf-8") as f:
                for record in iter_records(roots, kind, skip=keys):
                    keys.add(record["key"])
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
                    counts[kind] += 1
                    reasons.get(kind, Counter()).update([str(record.get("reason"))])
        _merge_faults(roots, tmp / f"{FAULTS}-{tag}.jsonl")
        sampling = [s for m in manifests for s in m.get("sampling", [])]
        write_manifest(
            tmp,
            {
                "format": STORE_FORMAT,
                **{k: manifests[0][k] for k in ("step", "version", "model")},
                "sampling": [s for i, s in enumerate(sampling) if s not in sampling[:i]],
                "shards": {tag: {"shard": "0/1", "complete": covered and not incomplete}},
                "merged_from": [
                    {"dir": str(r), "shards": sorted(m.get("shards", {}))}
                    for r, m in zip(roots, manifests, strict=True)
                ],
                "accepted": counts["accepted"],
                "rejected": counts["rejected"],
                "reject_reasons": dict(sorted(reasons["rejected"].items())),
                "failed": counts[FAILED],
                "failure_reasons": dict(sorted(reasons[FAILED].items())),
                "faults": read_faults(tmp),
                "r3forge_version": __version__,
            },
        )
        export_dataset(tmp)
        tmp.chmod(0o755)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not covered:
        shards = sorted({s["shard"] for m in manifests for s in m.get("shards", {}).values()})
        print(
            f"merge: warning: shards {shards} do not cover every i of N: items are missing", file=sys.stderr
        )
    if incomplete:
        print(
            f"merge: warning: shard(s) {incomplete} did not finish: rerun them, then merge again",
            file=sys.stderr,
        )
    return out


def _merge_faults(roots: list[Path], path: Path) -> None:
    """The folders' teacher fault increments in one log (each once: a folder given twice adds nothing); a
    folder from before the logs adds its manifest's `faults` as one increment."""
    with open(path, "w", encoding="utf-8") as f:
        for root in dict.fromkeys(r.resolve() for r in roots):
            faults = (read_manifest(root) or {}).get("faults") or {}
            if faults and not record_files(root, FAULTS):
                f.write(json.dumps({"key": f"manifest:{root}", "faults": faults}) + "\n")
        for record in iter_records(roots, FAULTS):
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


def _coverage(manifests: list[dict[str, Any]]) -> tuple[bool, list[str]]:
    """Whether the shard tags cover every i of N for some N, and the tags whose run did not finish."""
    specs = {t: s for m in manifests for t, s in m.get("shards", {}).items()}
    parsed = [ShardSpec.parse(s["shard"]) for s in specs.values()]
    by_count = {n: {p.index for p in parsed if p.count == n} for n in {p.count for p in parsed}}
    covered = any(indices == set(range(n)) for n, indices in by_count.items())
    return covered, sorted(t for t, s in specs.items() if not s.get("complete"))


def push_to_hub(
    folder: str | os.PathLike[str],
    repo_id: str,
    endpoint: str | None = None,
    token: str | None = None,
    private: bool = False,
) -> str:
    """Create the dataset repo (if needed) and upload the exported folder; returns the commit URL.

    `endpoint` points at any Hub-compatible server (default: $HF_ENDPOINT or huggingface.co).
    """
    folder = Path(folder)
    if not (folder / "README.md").is_file() or not (folder / ACCEPTED_PARQUET).is_file():
        raise SynthError(f"{folder}: nothing exported to push (run unsharded, or merge the shards first)")
    api = HfApi(endpoint=endpoint or None, token=token or None)
    where = f"{api.endpoint}/datasets/{repo_id}"
    try:
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            repo_type="dataset",
            allow_patterns=["README.md", MANIFEST, "data/*", "rejected/*"],
            commit_message=f"r3forge synth export ({folder.name})",
        )
    except Exception as e:  # HTTP status, connection, offline mode, validation: all reported the same way
        raise SynthError(
            f"push to {where} failed: {type(e).__name__}: {e} "
            "(check the repo id, the endpoint, the token (--hub_token or $HF_TOKEN) and HF_HUB_OFFLINE)"
        ) from e
    return str(getattr(info, "commit_url", where))


def push_from_config(folder: str | os.PathLike[str], hub: HubConfig) -> str | None:
    """`push_to_hub` with the CLI's `HubConfig` (None when no repo id is set)."""
    if not hub.push_to_hub:
        return None
    return push_to_hub(folder, hub.push_to_hub, hub.hub_endpoint, hub.hub_token, hub.hub_private)


# --- dataset card ------------------------------------------------------------------------------------------


def histogram(values: Sequence[float], bins: int = 8, width: int = 30) -> str:
    """A text histogram (equal-width bins), one line per bin.

    >>> print(histogram([1, 1, 2, 4], bins=2, width=4))
    [1, 2.5)  ####  3
    [2.5, 4]  #     1
    """
    values = [float(v) for v in values if v is not None]
    if not values:
        return "(no values)"
    lo, hi = min(values), max(values)
    if lo == hi:
        return f"[{lo:g}]  {'#' * width}  {len(values)}"
    step = (hi - lo) / bins
    counts = Counter(min(int((v - lo) / step), bins - 1) for v in values)
    top = max(counts.values())
    labels = [
        f"[{lo + i * step:.3g}, {lo + (i + 1) * step:.3g}{']' if i == bins - 1 else ')'}" for i in range(bins)
    ]
    pad = max(map(len, labels))
    lines = []
    for i in range(bins):
        bar = "#" * max(1, round(width * counts[i] / top)) if counts[i] else ""
        lines.append(f"{labels[i]:<{pad}}  {bar:<{width}}  {counts[i]}")
    return "\n".join(lines)


def _output_columns(ds: datasets.Dataset) -> list[str]:
    meta = {"key", "input", "step", "version", "model", "sampling", "raw", "reasoning", "finish_reasons"}
    meta |= {"prompt_tokens", "completion_tokens", "latency_s", "shard", "created", "reason", "detail"}
    return [c for c in ds.column_names if c not in meta]


def dataset_card(manifest: dict[str, Any], accepted: datasets.Dataset, rejected: datasets.Dataset) -> str:
    """README.md of an export: teacher, prompt version, sampling, counts, reject reasons, histograms."""
    total = len(accepted) + len(rejected)
    reasons = Counter(rejected["reason"]) if len(rejected) else Counter()
    rate = len(rejected) / total if total else 0.0
    lines = [
        "---",
        "configs:",
        "- config_name: default",
        "  data_files:",
        "  - split: train",
        "    path: data/train-*.parquet",
    ]
    if len(rejected):
        lines += [
            "- config_name: rejected",
            "  data_files:",
            "  - split: train",
            "    path: rejected/train-*.parquet",
        ]
    lines += ["tags:", "- r3forge", "- synthetic", "- distillation", "---", ""]
    lines += [
        f"# {manifest['step']} — teacher annotations ({manifest['version']})",
        "",
        f"Generated with r3forge {manifest.get('r3forge_version', __version__)}'s "
        f"synthesis engine: step `{manifest['step']}`, prompt version `{manifest['version']}`, "
        f"teacher `{manifest['model']}`.",
        "",
        "| | |",
        "|---|---|",
        f"| accepted | {len(accepted)} |",
        f"| rejected | {len(rejected)} ({rate:.1%}) |",
        f"| total | {total} |",
        f"| prompt tokens | {_sum(accepted, 'prompt_tokens') + _sum(rejected, 'prompt_tokens')} |",
        f"| completion tokens | {_sum(accepted, 'completion_tokens') + _sum(rejected, 'completion_tokens')} |",
        f"| shards | {', '.join(s['shard'] for s in manifest.get('shards', {}).values()) or '-'} |",
        "",
        *_faults_section(manifest),
        "## Sampling parameters",
        "",
        "```json",
        json.dumps(manifest.get("sampling", []), indent=1),
        "```",
        "",
        "## Reject reasons",
        "",
        "| reason | records | share of all |",
        "|---|---|---|",
        *[f"| `{r}` | {n} | {n / total:.1%} |" for r, n in reasons.most_common()],
        "",
        "## Distributions (accepted records)",
        "",
    ]
    lines += _distributions(accepted)
    lines += [
        "## Loading",
        "",
        "```python",
        "from datasets import load_dataset",
        'accepted = load_dataset("parquet", data_files="data/*.parquet", split="train")',
        "```",
        "",
        "Each record keeps its cache `key`, the item's identifying `input`, the teacher `model`, the prompt "
        "`version`, the `sampling` parameters (JSON), the `raw` outputs and `reasoning` (per request, per "
        "choice), `finish_reasons`, token usage and the latency of the backend call.",
        "",
    ]
    return "\n".join(lines)


def _faults_section(manifest: dict[str, Any]) -> list[str]:
    """Items that failed (not in the export; a rerun retries them) and the teacher's faults over all runs."""
    faults = manifest.get("faults", {})
    if not (manifest.get("failed") or faults.get("retries") or faults.get("timeouts")):
        return []
    rows = [
        ("failed items (not exported; a rerun retries them)", manifest.get("failed", 0)),
        ("failure reasons", manifest.get("failure_reasons", {})),
        ("teacher calls", faults.get("attempts", "-")),
        ("retries", faults.get("retries", 0)),
        ("retries by cause", faults.get("retries_by_cause", {})),
        ("timed-out calls", faults.get("timeouts", 0)),
        ("requests given up", faults.get("failed_requests", {})),
    ]
    table = [f"| {k} | {json.dumps(v) if isinstance(v, dict) else v} |" for k, v in rows]
    return ["## Teacher faults", "", "| | |", "|---|---|", *table, ""]


def _distributions(accepted: datasets.Dataset) -> list[str]:
    """Card sections of the accepted records: a value-count table for each output column with at most
    `MAX_LEVELS` distinct int/bool values (a 1-5 score, a yes/no verdict), a histogram for every other
    numeric column, and the length histogram of every text column that is not an id."""
    lines: list[str] = []
    columns = [("completion tokens", accepted["completion_tokens"] if len(accepted) else [])]
    columns.append(("latency of the batch call (s)", accepted["latency_s"] if len(accepted) else []))
    for name in _output_columns(accepted):
        values = [v for v in accepted[name] if v is not None]
        if not values:
            continue
        if all(isinstance(v, bool | int) for v in values) and len(set(values)) <= MAX_LEVELS:
            counts = Counter(values)
            lines += [f"### `{name}`", "", "| value | records | share |", "|---|---|---|"]
            lines += [f"| {v} | {counts[v]} | {counts[v] / len(values):.1%} |" for v in sorted(counts)]
            lines.append("")
        elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            columns.append((f"`{name}`", values))
        elif all(isinstance(v, str) for v in values) and name != "id" and not name.endswith("_id"):
            columns.append((f"`{name}` length (characters)", [len(v) for v in values]))
    for title, values in columns:
        lines += [f"### {title}", "", "```", histogram(list(values)), "```", ""]
    return lines


def _sum(ds: datasets.Dataset, column: str) -> int:
    return int(sum(ds[column])) if len(ds) and column in ds.column_names else 0
