"""What the verb groups of `mu.api` share: the block that stops the plugin
processes a function started, and the guard every exported function wears."""

from __future__ import annotations

from types import FunctionType

from mu import text

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict


class _plugins_stopped:
    """Stop the plugin processes started inside the block when it ends,
    unless a signal ends mu: the supervisor then stops every plugin itself,
    as mu ends (protocol "Process"), and says so.  A class, not a
    `contextlib` generator: `contextlib` is milliseconds of a verb's start."""

    def __enter__(self) -> None:
        from mu.runtime.supervisor import supervisor

        self._before = set(map(id, supervisor.running()))

    def __exit__(self, kind: Any, value: Any, tb: Any) -> bool:
        from mu.errors import Terminating
        from mu.runtime.supervisor import supervisor

        if not isinstance(value, Terminating):
            _stop_new(supervisor, self._before)
        return False  # whatever was raised goes on


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
