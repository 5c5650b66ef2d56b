"""Option values several verbs share, parsed one way."""

from __future__ import annotations

from mu.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List


def parse_params(pairs: List[str], option: str = "--param") -> Dict[str, str]:
    """`<option> <key>=<value>`, repeatable, into a map; a pair without `=`
    or a key given twice is a `UsageError` (exit 2)."""
    params: Dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{option} {pair!r} is not <key>=<value>")
        if key in params:
            raise UsageError(f"{option} {key} given twice")
        params[key] = value
    return params
