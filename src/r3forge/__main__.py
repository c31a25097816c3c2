import sys

from r3forge.cli import main

sys.exit(main())
