"""What the verb groups of `mu.api` share: the block that stops the plugin
processes a function started, and the guard every exported function wears."""

from __future__ import annotations

import contextlib
from types import FunctionType

from mu import text

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterator


@contextlib.contextmanager
def _plugins_stopped() -> Iterator[None]:
    """Stop the plugin processes started inside the block when it ends,
    unless a signal ends mu: the supervisor then stops every plugin itself,
    as mu ends (protocol "Process"), and says so."""
    from mu.errors import Terminating
    from mu.runtime.supervisor import supervisor

    before = set(map(id, supervisor.running()))
    try:
        yield
    except Terminating:
        raise
    except BaseException:
        _stop_new(supervisor, before)
        raise
    _stop_new(supervisor, before)


def _stop_new(supervisor: Any, before: set) -> None:
    for process in supervisor.running():
        if id(process) not in before:
            process.stop("the verb is done")


def guard(namespace: Dict[str, Any]) -> None:
    """Wrap every function of the module's `__all__` in `text.guarded`.

    Every function of `mu.api` refuses an argument holding text that is not
    valid UTF-8 (a lone surrogate, as Python decodes such bytes of a command
    line) with a `UsageError` (exit 2) naming the parameter, before it does
    anything (`mu.text`).  Each group's module calls this last, on its own
    globals: the guarded function is the one the module's other functions
    call and the one `mu.api` exports; a function defined below the call is
    not guarded (tests/test_input.py checks them all)."""
    for name in namespace["__all__"]:
        if isinstance(namespace.get(name), FunctionType):  # a name made on first read is no function
            namespace[name] = text.guarded(namespace[name])
