"""The tree's layering, checked by reading its imports (no module is run).

Floors, lowest first: `mu.protocol`, `mu.deadline`, `mu.errors`, `mu.ids`
and `mu.environment` (leaves) under `mu.store` and `mu.rpc`, under
`mu.runtime`, under the seams, effects, panes and agents, under `mu.cli`.
The rules below are the ones that have been broken before, or that keep a
promise (the SDK's start-up, a plugin built on the SDK alone).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterator, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mu"


def modules(folder: str) -> Iterator[Path]:
    base = PACKAGE / folder if folder else PACKAGE
    if base.suffix == ".py":
        yield base
        return
    yield from sorted(base.rglob("*.py"))


def imported(path: Path) -> Set[str]:
    """Every module `path` imports, at any depth of the file (a function's
    lazy import counts as much as one at the top)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def offending(folder: str, allowed: Tuple[str, ...]) -> Set[str]:
    """`file: module` for each mu module that `folder` imports outside `allowed`."""
    found = set()
    for path in modules(folder):
        for name in imported(path):
            if name.startswith("mu."):  # `from mu import x` is seen as mu.x
                if not any(name == a or name.startswith(a + ".") for a in allowed):
                    found.add(f"{path.relative_to(ROOT)}: {name}")
    return found


# Leaves of the standard library alone, which every layer may import, the
# SDK and the shipped plugins included: each stands in for a standard module
# that costs a process's start milliseconds (issue 31), or defers one.
SHARED_LEAVES = ("mu.jsontext", "mu.digest", "mu.shellwords", "mu.plain", "mu.lazy", "mu.records", "mu.spawning",
                 "mu.filebytes")


def test_the_store_imports_no_layer_above_it():
    # records only: no plugin processes, seams, verbs
    leaves = ("mu.errors", "mu.environment", "mu.ids", "mu.deadline", "mu.names", "mu.protocol", "mu.logentry")
    assert offending("store", ("mu.store",) + leaves + SHARED_LEAVES) == set()


@pytest.mark.parametrize("folder", ["protocol", "sdk"])
def test_the_protocol_and_the_sdk_import_only_each_other(folder):
    # a plugin built on mu.sdk loads nothing of mu's runtime (mu.schema, the
    # shipped schema's bytes and digest, is a stdlib-only leaf)
    assert offending(folder, ("mu.protocol", "mu.sdk", "mu.schema") + SHARED_LEAVES) == set()


def test_the_shipped_plugins_import_only_the_sdk():
    # mu/plugins/ (mu-plugin-ssh) are plugins like any other: built on
    # mu.sdk alone, they load nothing of mu's runtime
    assert offending("plugins", ("mu.plugins", "mu.sdk") + SHARED_LEAVES) == set()


@pytest.mark.parametrize("leaf", ["deadline.py", "errors.py", "ids.py", "logentry.py"])
def test_the_leaves_import_only_the_protocol(leaf):
    assert offending(leaf, ("mu.protocol",)) == set()


def test_the_schema_imports_only_the_protocol_and_the_shared_leaves():
    assert offending("schema.py", ("mu.protocol",) + SHARED_LEAVES) == set()


@pytest.mark.parametrize("leaf", [name.split(".")[1] + ".py" for name in SHARED_LEAVES])
def test_the_shared_leaves_import_nothing_of_mu(leaf):
    assert offending(leaf, ()) == set()


def test_nothing_below_the_command_line_imports_it():
    for folder in ("store", "rpc", "runtime", "effects", "seams", "panes", "agents", "contract", "sdk", "protocol"):
        assert {f for f in offending(folder, ("mu",)) if ".cli" in f.split(": ")[1]} == set(), folder


WHOLE_API = re.compile(r'from mu import api\b|Lazy\("mu\.api"\)|^\s*import mu\.api\s*$', re.M)


def test_the_command_line_calls_the_api_group_it_needs():
    """A verb's module names its group (`mu.api.tasks`, `mu.api.hosts`, ...):
    which part of the API a verb stands on is read from its imports."""
    whole = [str(p.relative_to(ROOT)) for p in modules("cli") if WHOLE_API.search(p.read_text())]
    assert whole == []


def test_the_protocols_numbers_are_written_once():
    # protocol "Transport" and "Registration and trust": 1 MiB and the
    # executable's prefix live in mu/protocol/constants.py alone
    mib = re.compile(r"\b1\s*<<\s*20\b|\b1024\s*\*\s*1024\b|\b1048576\b")
    for path in modules(""):
        if path.parent.name == "protocol":
            continue
        text = path.read_text()
        if "mu-plugin-" in text:  # only then can the tree hold it: the parse is the test's cost
            tree = ast.parse(text)
            prefixes = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == "mu-plugin-"]
            assert not prefixes, f"{path.relative_to(ROOT)} spells the executable prefix itself"
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        assert not mib.search(code), f"{path.relative_to(ROOT)} spells 1 MiB itself"


def test_the_checks_read_what_they_claim():
    # a guard on the guard: the walk sees a lazy import inside a function
    assert "mu.store.journal" in imported(PACKAGE / "cli" / "main.py")


def _messages(path: Path) -> Iterator[str]:
    """The string literals of `path` that are not docstrings: messages,
    hints, SQL."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value


@pytest.mark.parametrize("module", ["hosts.py"])  # store/plugins.py's refusals still name their verbs
def test_the_store_names_no_verb_in_its_messages(module):
    # LAYOUT rule 3: which verb resolves what is the seams' to say; the
    # store holds rows, SQL and transactions
    path = PACKAGE / "store" / module
    verbs = [text for text in _messages(path) if "`mu " in text]
    assert verbs == [], f"{path.relative_to(ROOT)} names a verb: {verbs[0]!r}"


def test_the_host_checks_live_in_the_seams():
    # LAYOUT rule 3: `mu host check` parses, makes one call and prints; the
    # phases, the steps and the hand-back are mu.seams.checks'
    cli = PACKAGE / "cli" / "host.py"
    calls = {n.func.attr for n in ast.walk(ast.parse(cli.read_text())) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute)}
    assert "check_steps" not in calls and "host_check" in calls
    assert "mu.seams.link" in imported(PACKAGE / "seams" / "checks.py")


def _module_names() -> dict:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _edges(name: str, path: Path, known: dict) -> Set[str]:
    """The mu modules `name` imports, at any depth (a `from pkg import mod`
    counts as the module; relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{module}.{alias.name}" in known:
                    found.add(f"{module}.{alias.name}")
                elif module in known:
                    found.add(module)
    found.discard(name)
    return found


def _circle_from(start: str, graph: dict) -> list:
    """One circle through `start` over modules named after it (so each
    circle is reported once, from its first name), or []."""
    path, seen = [start], {start}

    def walk(node: str) -> list:
        for nxt in sorted(graph[node]):
            if nxt == start:
                return path + [start]
            if nxt not in seen and nxt > start:
                seen.add(nxt)
                path.append(nxt)
                found = walk(nxt)
                if found:
                    return found
                path.pop()
        return []

    return walk(start)


def test_no_module_of_mu_imports_in_a_circle():
    # every call goes down: a lower module names what it needs of its owner
    # in an interface of its own rather than importing it back
    known = _module_names()
    graph = {name: _edges(name, path, known) for name, path in known.items()}
    circles = [" -> ".join(c) for c in (_circle_from(start, graph) for start in sorted(graph)) if c]
    assert circles == [], "import circles:\n" + "\n".join(circles)
