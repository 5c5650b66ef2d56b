"""A name a verb group imports only when a verb first uses it.

One module holds every verb of a group, but a verb pays at start-up for
every import at the top of its module: `mu host list` reads two tables and
prints them, and importing the seams would bring in the whole runtime it
never uses (processes, the reactor, the effects engine).  A `Lazy` stands
where the import was: the first attribute read or call imports the module
(or takes the attribute from it) and hands everything on from then on.

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
            import importlib

            target = importlib.import_module(self._module)
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
