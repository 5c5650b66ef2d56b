"""`NamedTuple` without `typing`: mu's records and results, written as the
class syntax of `typing.NamedTuple` is, made by `collections.namedtuple`.

Every verb that calls a plugin imports the runtime and the store, whose
records (a host, a job, a registration, an intent, a reply) are named
tuples; `typing` and what it imports were milliseconds of every such verb,
paid before the plugin's handshake (issue 31).  A class written

    class Run(NamedTuple):
        exit_code: Optional[int]
        stdout: str
        timed_out_note: str = ""

        def failed(self) -> bool: ...

is the same class under either import: the fields in the order written
(read from the class's annotations, which `from __future__ import
annotations` keeps as text, never evaluated), the trailing defaults, the
methods, properties and docstring set on the tuple class itself, so
`_replace`, `_fields`, `_asdict`, equality with a plain tuple and
pickling are `collections.namedtuple`'s own.  A leaf: it imports only
`collections` (which the runtime's imports load anyway).
"""

from __future__ import annotations

import collections

# what a record class may not define (namedtuple's own machinery)
_RESERVED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults",
                       "_make", "_replace", "_asdict", "_source"})


class _Maker(type):
    def __new__(mcs, name: str, bases: tuple, namespace: dict) -> type:
        if namespace.get("_root"):
            return super().__new__(mcs, name, bases, namespace)
        fields = list(namespace.get("__annotations__", {}))
        defaults = []
        for field in fields:
            if field in namespace:
                defaults.append(namespace[field])
            elif defaults:
                raise TypeError(f"{name}: field {field} without a default follows one with a default")
        made = collections.namedtuple(name, fields, defaults=defaults, module=namespace.get("__module__"))
        made.__annotations__ = dict(namespace.get("__annotations__", {}))
        for key, value in namespace.items():
            if key in _RESERVED:
                raise AttributeError(f"{name}: cannot set {key} on a record")
            if key not in fields and key not in ("__annotations__", "__module__", "__qualname__"):
                setattr(made, key, value)
        made.__qualname__ = namespace.get("__qualname__", name)
        return made


class _Record(metaclass=_Maker):
    _root = True


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple  # what a checker reads: the classes are typing's kind
else:
    def NamedTuple(*args: object, **kwargs: object) -> None:  # noqa: N802 (the name it stands in for)
        """Only as a base class (`class Row(NamedTuple): ...`)."""
        raise TypeError("mu.records.NamedTuple is a base class only")

    NamedTuple.__mro_entries__ = lambda bases: (_Record,)
