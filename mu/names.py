"""The one rule for the names mu gives things (plugins, hosts): lower-case
letters, digits, '-' and '_', starting with a letter or a digit.

A leaf: the store and the runtime both check names, and neither may
import the other for it.
"""

from __future__ import annotations

from mu.errors import UsageError
from mu.plain import is_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable, Optional

# The rule as a pattern, for whoever wants one (`mu.runtime.trust` shows
# it); `is_name` (mu.plain) tests the same rule by hand, so that a verb
# checking a name does not import `re` for it (milliseconds of start-up).
NAME_RULE = r"[a-z0-9][a-z0-9_-]*\Z"


def check_name(name: str, what: str = "plugin") -> None:
    """`UsageError` (exit 2) unless `name` follows the rule."""
    if not is_name(name):
        raise UsageError(
            f"{what} name {name!r} is not valid",
            "names are lower-case letters, digits, '-' and '_', starting with a letter or digit",
        )


def closest(word: str, known: Iterable[str]) -> Optional[str]:
    """The one known word a small edit away from `word` (a slip of the
    keyboard: `wiat`, `ws/claud1`, `write-the-tets`), or None.  One rule for
    every guess mu makes, a verb's or an option's (`mu.cli.misuse`) and a
    recorded name's (`mu.store.unknown`)."""
    import difflib  # where it is used: only a refusal needs it

    found = difflib.get_close_matches(word, sorted(set(known)), n=1, cutoff=0.75)
    return found[0] if found else None


def __getattr__(attribute: str) -> object:
    # `NAME_PATTERN`, the rule compiled, made on first use.
    if attribute == "NAME_PATTERN":
        import re

        globals()["NAME_PATTERN"] = pattern = re.compile(NAME_RULE)
        return pattern
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
