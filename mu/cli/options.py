"""Option values several verbs share, parsed one way."""

from __future__ import annotations

from typing import Dict, List

from mu.errors import UsageError


def parse_params(pairs: List[str]) -> Dict[str, str]:
    """`--param <key>=<value>`, repeatable, into a map; bad ones exit 2."""
    params: Dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--param {pair!r} is not <key>=<value>")
        if key in params:
            raise UsageError(f"--param {key} given twice")
        params[key] = value
    return params
