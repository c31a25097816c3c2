"""`python -m r3forge.synth run|merge`: the same as `r3forge synth run|merge` (`r3forge.synth.cli`)."""

import sys

from r3forge.errors import R3ForgeError
from r3forge.synth.cli import merge, run

USAGE = "usage: python -m r3forge.synth {run,merge} [--config file.yaml] [--flags]  (--help for flags)"
argv = sys.argv[1:]
if not argv or argv[0] not in ("run", "merge"):
    print(USAGE, file=sys.stdout if not argv or argv[0] in ("-h", "--help") else sys.stderr)
    sys.exit(0 if not argv or argv[0] in ("-h", "--help") else 2)
try:
    sys.exit((run if argv[0] == "run" else merge)(argv[1:]))
except R3ForgeError as e:
    print(f"r3forge synth: error: {e}", file=sys.stderr)
    sys.exit(1)
