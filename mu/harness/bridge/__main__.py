"""`python3 -m mu.harness.bridge <harness> ...`: mu-bridge, as bin/mu-bridge runs it."""

import sys

from . import main

sys.exit(main())
