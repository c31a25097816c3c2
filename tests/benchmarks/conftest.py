"""The benchmark scripts run as scripts (`python tests/benchmarks/x.py`), where their own folder is on sys.path and
one may import a sibling (`from agent_ledger import copy_eval`). pytest imports them for their doctests in
importlib mode, which adds no folder: this puts theirs on the path, as running them does."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
