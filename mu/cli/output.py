"""How verbs speak: JSON documents and human text on stdout, errors on stderr.

`--json` output is one JSON document on stdout and nothing else there,
on one line, always through `emit_json` (docs/DECISIONS.md, "Every
`--json` document is one line, printed by one function"); errors are
one line `mu: <what went wrong>` on stderr, with at most one line of
remedy in parentheses after it; a result's next step (`next_step`) is
one line on stderr too.

Human text, errors too, passes through `visible` (a table's cells, and
`mu top`'s lines, through `one_line`): what an agent, a plugin or a
task's author wrote is shown, never obeyed.  A control character (an
escape sequence's ESC, a carriage return, a C1 code) is written out as a
backslash, `x` and two hex digits, so no text mu shows can move the
cursor, recolour or retitle the terminal, or hide what is before it.
`--json` needs little: JSON escapes C0 controls itself, and `json_safe`
escapes the C1 ones it leaves.  The output of a script `mu host exec`
runs is the script's, passed through as it is.
"""

from __future__ import annotations

import sys

from mu import jsontext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional


def emit_json(document: Any) -> None:
    """Print `document` as every `--json` of mu prints one: compact, on one
    line ending in a newline, keys in the order the result gives them,
    text as it is (UTF-8, not \\u escapes) but for the C1 controls
    `json_safe` escapes.  `mu log --follow --json` prints one such line an
    entry, so any of them can be read a line at a time."""
    if isinstance(document, list) and not document:
        sys.stdout.write("[]\n")  # what json writes for it, without loading the encoder (`mu agent list`'s lean path)
        return
    sys.stdout.write(json_safe(jsontext.dumps(document, ensure_ascii=False)) + "\n")


# JSON escapes C0 controls itself but may write C1 ones (U+0080 to U+009F)
# raw, which a terminal can take for an escape sequence's start
_C1_ESCAPED = {c: "\\u%04x" % c for c in range(0x80, 0xA0)}


def json_safe(text: str) -> str:
    """JSON text (`json.dumps` with ensure_ascii=False) with its C1
    characters escaped as JSON escapes (the same document, safe to print)."""
    return text.translate(_C1_ESCAPED)


# every C0 control, DEL and every C1 control, written out as backslash-x-NN;
# `visible` keeps newlines and tabs, `one_line` does not
_ONE_LINE = {c: "\\x%02x" % c for c in [*range(0x20), *range(0x7F, 0xA0)]}
_LINES = {c: shown for c, shown in _ONE_LINE.items() if c not in (0x09, 0x0A)}


def visible(text: str) -> str:
    """`text` with its control characters written out, newlines and tabs kept."""
    return text.translate(_LINES)


def one_line(text: str) -> str:
    """`text` with every control character written out, newlines too."""
    return text.translate(_ONE_LINE)


def emit(text: str = "") -> None:
    sys.stdout.write(visible(text) + "\n")


def next_step(command: str) -> None:
    """The plain next command a person runs after this result, as the last
    line on stderr: `next: <command>`.  stderr, so that what a script
    reads of stdout (a msgId, a task's id) stays the result alone; never
    with --json (the caller does not call it there); `MU_HINTS=off` turns
    it off (docs/DECISIONS.md, "The next step, on stderr")."""
    from mu.environment import hints_on

    if hints_on():
        sys.stdout.flush()  # the result first, where both go to one terminal
        sys.stderr.write(f"next: {visible(command)}\n")


def error(message: str, hint: Optional[str] = None) -> None:
    sys.stderr.write(f"mu: {visible(message)}\n")
    if hint:
        sys.stderr.write(f"({visible(hint)})\n")


def iso_ms(epoch_ms: int) -> str:
    import datetime

    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def table(rows: list, headers: list) -> None:
    """Columns padded to their widest cell; the last column is not padded."""
    cells = [headers] + [[one_line(str(c)) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for row in cells:
        parts = [c.ljust(widths[i]) for i, c in enumerate(row[:-1])] + [row[-1]]
        emit("  ".join(parts).rstrip())


def commits_held(got: Any) -> str:
    """What a collect (`mu.api.CollectResult`) left on the branch: the
    agent's commits it holds, and how many this collect added (a wait's own
    collect may have brought them already)."""
    return f"{got.holds} commit{'' if got.holds == 1 else 's'} of the agent's, {got.new} new with this collect"
