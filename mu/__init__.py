"""mu: run coding agents on hosts through plugins.

The package is importable without side effects; `mu.cli.main` is the
command line, `mu.sdk` is the library for plugin authors.
"""

__version__ = "0.1.0"
