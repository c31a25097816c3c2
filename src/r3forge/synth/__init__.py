"""Teacher data synthesis: a general engine for `prompt()` + `parse()` steps over a generation backend.

    from r3forge.synth import EngineConfig, Rejected, load_accepted, merge_shards, run_step

* `engine`: `SynthesisStep` (protocol), `Rejected`, `EngineConfig`, `run_step`, `RunSummary`;
* `store`: the crash-safe sharded JSONL store, cache keys, `ShardSpec`;
* `export`: `load_accepted` / `load_rejected`, `merge_shards`, Parquet + dataset card, `push_to_hub`;
* `faults`: items whose teacher requests failed (retried by the next run) and the teacher's fault counts;
* `cli`: `python -m r3forge.synth run|merge`.

Names are imported on first use: importing the package costs nothing until one is needed.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EngineConfig": "engine",
    "Rejected": "engine",
    "RunSummary": "engine",
    "SynthesisStep": "engine",
    "run_step": "engine",
    "HubConfig": "export",
    "export_dataset": "export",
    "load_accepted": "export",
    "load_rejected": "export",
    "merge_shards": "export",
    "push_to_hub": "export",
    "ShardSpec": "store",
    "SynthError": "store",
    "cache_key": "store",
    "sampling_params": "store",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'r3forge.synth' has no attribute {name!r}")
    return getattr(importlib.import_module(f"r3forge.synth.{_EXPORTS[name]}"), name)
