"""What mu accepts as text from the person or program driving it: valid
UTF-8, and, where a variable's name is meant, a valid one.

Python hands a command line's bytes that are not UTF-8 over as lone
surrogates ("\\udcff"): such a str cannot be stored, sent to a plugin as
JSON text, or put in an environment.  Every text is checked here before
anything is written, so bad input is refused (`UsageError`, exit 2) in one
line naming where it came from, never a traceback half way through a verb.

One module for both callers: `mu.cli.options` names the option or argument
a text came from; `mu.api` (`guarded`) names the function's parameter.  A
leaf, like `mu.names`: it imports only `mu.errors`.  The error names the
place, never the value (an `--env` value may be a secret).
"""

from __future__ import annotations

from mu.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Mapping, Optional, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])

_NAME_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_REST = _NAME_FIRST | frozenset("0123456789")


# what does not show as itself where mu prints a person's text: controls
# (Cc), format characters (Cf: bidi overrides, zero-width spaces and
# joiners), line and paragraph separators (Zl, Zp)
HIDDEN_CATEGORIES = frozenset(("Cc", "Cf", "Zl", "Zp"))


def hidden_character(text: str) -> Optional[str]:
    """The first character of `text` that would not show as itself in a
    table or a terminal (HIDDEN_CATEGORIES), as U+XXXX, or None.  One rule
    for every short text mu shows in a row: a task's title here, and the
    names (`mu.names`), whose ASCII rule leaves none of these in."""
    import unicodedata

    for c in text:
        if unicodedata.category(c) in HIDDEN_CATEGORIES:
            return "U+%04X" % ord(c)
    return None


def is_utf8(text: str) -> bool:
    """Whether `text` can be written as UTF-8 (it holds no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check(text: Optional[str], what: str) -> None:
    """`UsageError` naming `what` unless `text` (None passes) is valid UTF-8."""
    if text is not None and not is_utf8(text):
        raise UsageError(f"{what} is not valid UTF-8")


def check_value(value: Any, what: str) -> None:
    """`check` every text in `value`: a str, or the strs in a list, tuple or
    mapping (keys and values), one level deep; anything else passes."""
    if isinstance(value, str):
        check(value, what)
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, str):
                check(item, what)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                check(key, f"a name in {what}")
            if isinstance(item, str):
                check(item, f"{what} {key}" if isinstance(key, str) and is_utf8(key) else what)


def check_given(value: Optional[str], what: str) -> None:
    """`UsageError` when `value` is given but blank: an empty `--from` or
    `--into` is a mistake, not a way to ask for the default."""
    if value is not None and not value.strip():
        raise UsageError(f"{what} cannot be empty", f"leave {what} out for its default")


def is_variable_name(name: str) -> bool:
    """Whether `name` is a variable name a shell can set:
    [A-Za-z_][A-Za-z0-9_]*."""
    return bool(name) and name[0] in _NAME_FIRST and _NAME_REST.issuperset(name)


def check_env(env: Optional[Mapping[str, str]], what: str = "--env") -> None:
    """`UsageError` unless every name in `env` is a variable name and every
    value valid UTF-8; the error names the variable, never its value."""
    for name, value in (env or {}).items():
        check(name, f"a variable name in {what}")
        if not is_variable_name(name):
            raise UsageError(f"{what} {name!r} is not a variable name",
                             "a name is letters, digits and '_', not starting with a digit")
        check(value, f"the value of {what} {name}")


def guarded(function: F) -> F:
    """`function`, refusing text that is not valid UTF-8 in any of its
    arguments (`check_value`, naming the parameter) before it runs."""
    import functools

    code = function.__code__
    positional = code.co_varnames[: code.co_argcount]

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        for name, value in zip(positional, args):
            check_value(value, f"argument {name!r}")
        for name, value in kwargs.items():
            check_value(value, f"argument {name!r}")
        return function(*args, **kwargs)

    return call  # type: ignore[return-value]
