"""A name a module imports only when it is first used.

A module pays at import for every import at its top: a verb group holds
every verb of the group, and `mu host list`, which reads two tables and
prints them, would bring in the whole runtime it never uses (processes,
the reactor, the effects engine); `mu.api` holds every verb, and a script
or `mu log` that imports it would pay for the agents' machinery.  A
`Lazy` stands where the import was: the first attribute read or call
imports the module (or takes the attribute from it) and hands everything
on from then on.

What a caller may rely on: attribute reads and calls behave as on the
module or object itself, after one import; `isinstance` against a `Lazy`
does not work (import the class where it is needed for that).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional


class Lazy:
    """The module `module`, or its attribute `attribute`, imported on first use."""

    __slots__ = ("_module", "_attribute", "_target")

    def __init__(self, module: str, attribute: Optional[str] = None) -> None:
        self._module = module
        self._attribute = attribute
        self._target: Any = None

    def _resolve(self) -> Any:
        target = self._target
        if target is None:
            # `__import__`, not importlib: the import statement's own path,
            # which `python -X importtime` reports (tests/test_startup.py)
            target = __import__(self._module, fromlist=["_"])
            if self._attribute is not None:
                target = getattr(target, self._attribute)
            self._target = target
        return target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resolve(), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        what = self._module if self._attribute is None else f"{self._module}.{self._attribute}"
        return f"<lazy {what}>"


class LazyPattern:
    """A regular expression, compiled (and `re` imported) at its first use:
    a module's patterns cost nothing until a call checks a value with one.
    Every attribute (``match``, ``fullmatch``, ``pattern``...) is the
    compiled pattern's."""

    __slots__ = ("_source", "_compiled")

    def __init__(self, source: str) -> None:
        self._source = source
        self._compiled: Any = None

    def __getattr__(self, name: str) -> Any:
        compiled = self._compiled
        if compiled is None:
            import re

            compiled = self._compiled = re.compile(self._source)
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"<lazy pattern {self._source!r}>"
