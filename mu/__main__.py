"""`python -m mu` is `bin/mu`."""

from mu.cli.main import run

run()
