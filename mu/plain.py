"""Plain words, checked by hand: mu's names, and plain file names.

Both rules are small character sets and a length, so they are tested
character by character: a verb or a plugin's call that checks a name does
not import `re` for it (milliseconds of a process's start).  A leaf of
the standard library alone: the store, the runtime, the SDK and the
shipped plugins all check names, and none of them may import another for
it.
"""

from __future__ import annotations

# mu's names (plugins, hosts): the pattern `mu.names.NAME_RULE` writes out
_NAME_FIRST = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_NAME_REST = _NAME_FIRST | {"_", "-"}
# plain file names: ASCII letters, digits, '_', then '.' and '-' as well
_PLAIN_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_PLAIN_REST = _PLAIN_FIRST | {".", "-"}


def is_name(name: str) -> bool:
    """Whether `name` is lower-case letters, digits, '-' and '_', starting
    with a letter or a digit (any length: callers cap their own)."""
    return bool(name) and name[0] in _NAME_FIRST and _NAME_REST.issuperset(name)


def is_plain(text: str, longest: int) -> bool:
    """Whether `text` is a plain file name of at most `longest` characters:
    an ASCII letter, digit or '_', then those, '.' and '-' (the pattern
    ``[A-Za-z0-9_][A-Za-z0-9._-]{0,longest-1}\\Z``)."""
    return 0 < len(text) <= longest and text[0] in _PLAIN_FIRST and _PLAIN_REST.issuperset(text)
