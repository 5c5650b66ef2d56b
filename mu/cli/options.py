"""Option values several verbs share, parsed one way."""

from __future__ import annotations

from mu import text
from mu.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping


def check_texts(args: Mapping[str, Any]) -> None:
    """Every text of a parsed command line (docopt's answer) is valid UTF-8,
    checked before the verb writes anything: else a `UsageError` (exit 2)
    naming the option or argument as the usage spells it (`--send`,
    `<text>`), and for `--env` the variable, never a value."""
    for key, value in args.items():
        if key == "--env" and isinstance(value, list):
            for pair in value:
                name, sep, rest = pair.partition("=")
                text.check(name, "a variable name in --env")
                text.check(rest, f"the value of --env {name}" if sep else "--env")
        else:
            text.check_value(value, key)


STDIN = "-"  # as a message's text: read it from standard input


def text_or_stdin(value: str, where: str, agent: str) -> str:
    """A message's text as given, or, when it is `-`, all of standard
    input (for a text longer than a command line's word may be, 128 KiB on
    Linux), as it is: UTF-8, a trailing newline kept.  Text that is not
    UTF-8 is a `UsageError` (exit 2) naming `where`, read before anything
    is written.  The name of the `agent` it goes to is checked first, so a
    bad one is refused without waiting for the input's end."""
    if value != STDIN:
        return value
    import sys

    from mu.agents import split_agent

    split_agent(agent)

    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{where} read from standard input is not valid UTF-8") from None


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
