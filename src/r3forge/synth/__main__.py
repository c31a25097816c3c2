"""`python -m r3forge.synth run|merge` (see `r3forge.synth.cli`)."""

import sys

from r3forge.errors import R3ForgeError
from r3forge.synth.cli import main

try:
    sys.exit(main())
except R3ForgeError as e:
    print(f"r3forge synth: error: {e}", file=sys.stderr)
    sys.exit(1)
