"""The hand-written name checks a plugin's calls use instead of `re` (issue
31) accept exactly what their patterns accept."""

from __future__ import annotations

import random
import re

import pytest

from mu.plain import is_plain
from mu.plugins.local.layout import is_handle

PLAIN = {100: re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}\Z"), 128: re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}\Z")}
HANDLE = re.compile(r"h-[0-9a-f]{12}\Z")
EDGES = ["", "a", "_", ".a", "-a", "a.b-c_d", "a\n", "é", "a b", "a/b", "x" * 100, "x" * 101, "x" * 128, "x" * 129,
         "h-0123456789ab", "h-0123456789abc", "h-0123456789a", "h-0123456789aB", "h-0123456789ab\n", "H-0123456789ab"]


@pytest.mark.parametrize("text", EDGES)
def test_the_edges(text):
    for longest, pattern in PLAIN.items():
        assert is_plain(text, longest) == bool(pattern.match(text))
    assert is_handle(text) == bool(HANDLE.match(text))


def test_many_random_texts():
    rng = random.Random(31)
    for _ in range(20000):
        if rng.random() < 0.3:
            text = "h-" + "".join(rng.choice("0123456789abcdefg") for _ in range(rng.choice([11, 12, 13])))
        else:
            text = "".join(rng.choice("aZ09_.-é \n/") for _ in range(rng.choice([0, 1, 2, 14, 99, 100, 101, 128, 129])))
        for longest, pattern in PLAIN.items():
            assert is_plain(text, longest) == bool(pattern.match(text)), (text, longest)
        assert is_handle(text) == bool(HANDLE.match(text)), text
