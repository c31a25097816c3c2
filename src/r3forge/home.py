"""Where r3forge keeps what it materializes: `$R3FORGE_HOME`, default `~/.cache/r3forge`."""

from __future__ import annotations

import os
from pathlib import Path


def r3forge_home() -> Path:
    """The cache root (`$R3FORGE_HOME`, default `~/.cache/r3forge`), created on first use."""
    root = Path(os.environ.get("R3FORGE_HOME") or Path.home() / ".cache" / "r3forge").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root
