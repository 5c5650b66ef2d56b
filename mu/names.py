"""The one rule for the names mu gives things (plugins, hosts): lower-case
letters, digits, '-' and '_', starting with a letter or a digit.

A leaf: the store and the runtime both check names, and neither may
import the other for it.
"""

from __future__ import annotations

import re

from mu.errors import UsageError

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")


def check_name(name: str, what: str = "plugin") -> None:
    """`UsageError` (exit 2) unless `name` follows the rule."""
    if not NAME_PATTERN.match(name):
        raise UsageError(
            f"{what} name {name!r} is not valid",
            "names are lower-case letters, digits, '-' and '_', starting with a letter or digit",
        )
