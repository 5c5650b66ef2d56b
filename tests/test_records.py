"""mu.records' `NamedTuple`: the class syntax of `typing.NamedTuple`, made
without importing `typing` (issue 31).  A record written with it is the
same class as one written with typing's: held side by side here."""

from __future__ import annotations

import pickle
import subprocess
import sys
import typing

import pytest

from mu import records


class Run(records.NamedTuple):
    """A run's outcome."""

    exit_code: typing.Optional[int]
    stdout: str
    note: str = ""

    def failed(self) -> bool:
        return self.exit_code != 0

    @property
    def shown(self) -> str:
        return f"{self.exit_code}: {self.stdout}"

    @classmethod
    def ok(cls, stdout: str) -> "Run":
        return cls(0, stdout)


class TypedRun(typing.NamedTuple):
    """A run's outcome."""

    exit_code: typing.Optional[int]
    stdout: str
    note: str = ""


def test_a_record_is_what_typing_makes_of_the_same_class():
    mine, theirs = Run(3, "out"), TypedRun(3, "out")
    assert mine == theirs == (3, "out", "")
    assert Run._fields == TypedRun._fields and Run._field_defaults == TypedRun._field_defaults == {"note": ""}
    assert repr(mine) == "Run(exit_code=3, stdout='out', note='')"
    assert mine._replace(note="n") == Run(3, "out", "n") and isinstance(mine._replace(note="n"), Run)
    assert mine._asdict() == theirs._asdict()
    assert (mine.failed(), mine.shown, Run.ok("x")) == (True, "3: out", Run(0, "x", ""))
    assert Run.__doc__ == "A run's outcome." and Run.__module__ == __name__ and Run.__qualname__ == "Run"
    assert pickle.loads(pickle.dumps(mine)) == mine
    with pytest.raises(AttributeError):
        mine.stdout = "changed"  # type: ignore[misc]


def test_a_field_without_a_default_after_one_with_is_refused():
    with pytest.raises(TypeError):
        class Bad(records.NamedTuple):
            first: int = 0
            second: int


def test_it_imports_no_typing():
    done = subprocess.run([sys.executable, "-c", "import sys, mu.records; print('typing' in sys.modules)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
