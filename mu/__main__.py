"""`python -m mu` is `bin/mu`."""

import sys

from mu.cli.main import main

sys.exit(main())
