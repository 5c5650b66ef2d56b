"""Words for a POSIX shell, quoted as `shlex.quote` quotes them, without
importing `shlex` (which imports `re`: milliseconds of a plugin's start).

What a caller may rely on: `quote(word)` is `shlex.quote(word)`, character
for character (a word of only safe characters stands as it is; any other
is put in single quotes, a single quote in it written as '"'"'), and
`join(words)` is `shlex.join(words)`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable

# shlex's safe characters: [\w@%+=:,./-] in ASCII
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-")


def quote(word: str) -> str:
    """`word` as one shell word."""
    if not word:
        return "''"
    if _SAFE.issuperset(word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def join(words: Iterable[str]) -> str:
    """`words` as one shell command line."""
    return " ".join(quote(word) for word in words)
