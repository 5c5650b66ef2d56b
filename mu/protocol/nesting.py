"""How deep a JSON text nests, counted without recursion.

Python's JSON decoder recurses once per level, and so does every walk of
the value it returns (the trace's redaction, the encoder that records or
prints it): a value nested a few hundred deep decodes, then breaks the
first walk that runs from a deeper stack.  The readers that take JSON from
outside mu (a plugin's line, a person's command line) refuse a value
deeper than `MAX_JSON_DEPTH` (mu/protocol/constants.py) with
`deeper_than`, before anything walks it.

Standard library only, like the rest of mu.protocol.
"""

from __future__ import annotations

from itertools import accumulate, repeat
from operator import sub

from mu.protocol.constants import MAX_JSON_DEPTH

# a JSON string, escapes included (the unrolled form: no backtracking per
# character), and what is not a bracket: compiled on the first long value,
# so a reader of short lines never imports `re`
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_NOT_BRACKET = r"[^\[\]{}]+"
_compiled: list = []
# an opening bracket is 2, a closing one 0: minus 1 each, a running sum is the depth
_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


def depth(text: str) -> int:
    """The deepest nesting of arrays and objects in `text`, a JSON text
    that has been parsed (for any other text the count is a guess): 0 for
    a scalar, 1 for `{}` or `[1]`, 2 for `{"a": []}`.  Brackets inside
    strings do not count.  Linear in the text, with no Python loop over it."""
    if not _compiled:
        import re

        _compiled.extend((re.compile(_STRING), re.compile(_NOT_BRACKET)))
    strings, not_brackets = _compiled
    brackets = not_brackets.sub("", strings.sub("", text))
    if not brackets:
        return 0
    return max(accumulate(map(sub, brackets.encode("ascii").translate(_STEPS), repeat(1))))


def deeper_than(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether `text` (parsed JSON) nests deeper than `limit`.  A text with
    no more than `limit` opening brackets cannot, and is told in two counts
    (the usual message, however long, costs no scan)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    return depth(text) > limit
