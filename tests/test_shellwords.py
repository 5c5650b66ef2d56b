"""mu.shellwords quotes as shlex does, without importing it (issue 31)."""

from __future__ import annotations

import shlex

import pytest

from mu import shellwords

WORDS = ["", "plain", "with space", "it's", "'", "\"", "a$b", "x;y", "é", "tab\there", "new\nline", "-n", "--",
         "@%+=:,./-_", "ab\x00c", "ü-ok", "*", "~home", "a'b'c", "\\", "ǅ"]


@pytest.mark.parametrize("word", WORDS)
def test_a_word_is_quoted_as_shlex_quotes_it(word):
    assert shellwords.quote(word) == shlex.quote(word)


def test_words_are_joined_as_shlex_joins_them():
    assert shellwords.join(WORDS) == shlex.join(WORDS)
    assert shlex.split(shellwords.join(w for w in WORDS if "\x00" not in w)) == [w for w in WORDS if "\x00" not in w]
