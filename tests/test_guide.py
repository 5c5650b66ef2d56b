"""docs/writing-plugins.md, followed the way its reader follows it.

The guide marks its code with HTML comments that a reader never sees and
this file reads:

- ``<!-- step N: new file -->`` before a python block: the block is the
  whole of `mu-plugin-box` from step N on;
- ``<!-- step N: add to class Box -->``: the block's methods go at the end
  of the class's body;
- ``<!-- step N: add to the imports -->``: the block's `import` lines go
  among the file's `import` lines, its `from` lines among its `from`
  lines, in order;
- ``<!-- step N: replace <old> with <new> -->`` (no block): a one-place edit;
- ``<!-- step N: run -->`` before a sh block: the commands that show what
  step N did, run one by one with `bash` in the reader's folder;
- ``<!-- debug: run -->``, ``<!-- example: procs -->`` and
  ``<!-- the whole plugin -->``: the debugging commands, the `procs` sketch
  and the final listing.

Each step's test builds the file as it stands after that step, writes it as
a trusted executable (0755, ours, basename `mu-plugin-box`), replays the
earlier steps' cheap commands (registrations: never the suite), then runs
the step's own commands and holds each to what the text around it
promises.  The set of commands is pinned too, so a command added to the
guide without a promise checked here fails.

Also here: the guide's list of SDK names against `mu.sdk`'s exports, and
what mu says when a Python plugin fails before its handshake reply
(mu/runtime/client.py's hint).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional

import pytest
from conftest import ROOT, run_mu

from mu import sdk
from mu.runtime.client import debug_hint, handshake_line
from mu.sdk import procs

GUIDE = ROOT / "docs" / "writing-plugins.md"
PLUGIN = "mu-plugin-box"
COMMAND_TIMEOUT_S = 60
LOAD_CHECKS = ("trust", "handshake.answer", "handshake.schema", "handshake.name", "handshake.digest",
               "handshake.instance", "handshake.load-rules")


# -- reading the guide --------------------------------------------------------------


class Part(NamedTuple):
    mark: str  # the marker's text
    lang: Optional[str]  # the fence's language, None when the marker owns no block
    body: Optional[str]


_MARK = re.compile(r"<!-- (.+?) -->\Z")
_FENCE = re.compile(r"```(\w*)\Z")


def guide_parts(text: Optional[str] = None) -> List[Part]:
    """Every marker, with the fenced block on the line right after it."""
    lines = (GUIDE.read_text() if text is None else text).splitlines()
    parts = []
    for i, line in enumerate(lines):
        mark = _MARK.match(line)
        if not mark:
            continue
        fence = _FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if fence is None:
            parts.append(Part(mark.group(1), None, None))
            continue
        end = lines.index("```", i + 2)
        parts.append(Part(mark.group(1), fence.group(1), "\n".join(lines[i + 2:end]) + "\n"))
    return parts


def step_parts() -> List[tuple]:
    """(step, action, part) for every step marker, in the guide's order."""
    found = []
    for part in guide_parts():
        m = re.fullmatch(r"step (\d+): (.+)", part.mark)
        if m:
            found.append((int(m.group(1)), m.group(2), part))
    return found


def marked(mark: str) -> Part:
    hits = [p for p in guide_parts() if p.mark == mark]
    assert len(hits) == 1, f"the guide has {len(hits)} blocks marked {mark!r}"
    return hits[0]


def commands(mark: str) -> List[str]:
    """The command lines of every sh block with this marker."""
    lines = []
    for part in guide_parts():
        if part.mark == mark:
            assert part.lang == "sh", f"{mark}: a {part.lang} block"
            lines += [line for line in part.body.splitlines() if line.strip()]
    return lines


# -- building each step's file as a reader does -------------------------------------


def add_to_class(code: str, methods: str) -> str:
    lines = code.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("class Box("))
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace()), len(lines))
    while not lines[end - 1].strip():
        end -= 1
    return "\n".join(lines[:end] + [""] + methods.rstrip("\n").splitlines() + lines[end:]) + "\n"


def add_imports(code: str, imports: str) -> str:
    """Each `import x` among the file's `import` lines, each `from x import
    y` among its `from` lines, in order."""
    lines = code.splitlines()
    for new in imports.strip().splitlines():
        kind = new.split(" ", 1)[0] + " "
        assert kind in ("import ", "from "), new
        ours = [i for i, line in enumerate(lines) if line.startswith(kind)]
        assert ours, "the file has no import of that kind to put it beside"
        at = next((i for i in ours if lines[i] > new), ours[-1] + 1)
        lines.insert(at, new)
    return "\n".join(lines) + "\n"


def build(upto: int) -> str:
    """`mu-plugin-box` as it stands after step `upto`."""
    code: Optional[str] = None
    for step, action, part in step_parts():
        if step > upto or action == "run":
            continue
        if action == "new file":
            assert part.lang == "python"
            code = part.body
            continue
        assert code is not None, f"step {step} edits a file no step made"
        if action == "add to class Box":
            code = add_to_class(code, part.body)
        elif action == "add to the imports":
            code = add_imports(code, part.body)
        elif action.startswith("replace ") and " with " in action:
            old, new = action[len("replace "):].split(" with ", 1)
            assert code.count(old) == 1, f"step {step}: {old!r} is not in the file exactly once"
            code = code.replace(old, new)
        else:
            pytest.fail(f"step {step}: an action this test does not know: {action!r}")
    assert code is not None, f"no file by step {upto}"
    return code


# -- running the commands as a reader does ------------------------------------------


class Reader:
    """The reader's folder, shell and state: `mu` on PATH, mu importable."""

    def __init__(self, tmp_path: Path) -> None:
        self.folder = tmp_path / "work"
        self.folder.mkdir()
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        mu = bin_dir / "mu"
        mu.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(ROOT / 'bin' / 'mu'))} \"$@\"\n")
        mu.chmod(0o755)
        tmp = tmp_path / "tmp"  # the plugin's default box lands here, not in a shared /tmp
        tmp.mkdir()
        self.env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(ROOT),
                        TMPDIR=str(tmp), PWD=str(self.folder))

    def write(self, code: str) -> Path:
        """Make the file, or edit it in place: a new file is not executable
        until the `chmod` of step 1 (0755: ours, written by nobody else,
        as mu's trust checks want); an edit keeps the mode."""
        path = self.folder / PLUGIN
        fresh = not path.exists()
        path.write_text(code)
        if fresh:
            path.chmod(0o644)
        return path

    def run(self, line: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", line], cwd=self.folder, env=self.env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT_S)

    def catch_up(self, before: int) -> None:
        """Steps 1 to `before` - 1: their files and their commands, but the
        suite's runs, which change nothing a later step needs."""
        for step in range(1, before):
            self.write(build(step))
            for line in commands(f"step {step}: run"):
                if not line.startswith("mu plugin test"):
                    out = self.run(line)
                    assert out.returncode == 0, (step, line, out.stdout, out.stderr)


def check_lines(stdout: str) -> Dict[str, str]:
    """`mu plugin test`'s human report: check name -> ok, FAIL or skip."""
    found = {}
    for line in stdout.splitlines():
        m = re.match(r"(ok|FAIL|skip)\s+(\S+)", line)
        if m:
            found[m.group(2)] = m.group(1)
    assert "trust" in found, stdout
    return found


def the_line(stdout: str, name: str) -> str:
    return next(line for line in stdout.splitlines() if re.match(rf"(ok|FAIL|skip)\s+{re.escape(name)}(\s|$)", line))


def box_instance(folder: Path) -> str:
    return "box-" + hashlib.sha256(str(folder / "box").encode()).hexdigest()[:12]


# -- what each step promises --------------------------------------------------------


def suite_of_step_1(out, reader):
    # "exits 1: the suite's first lines pass ..., and the link's checks fail
    # with `no such method`"
    assert out.returncode == 1, out.stderr
    found = check_lines(out.stdout)
    assert all(found[name] == "ok" for name in LOAD_CHECKS), found
    for name in ("link.checkSteps", "link.exec"):
        assert found[name] == "FAIL" and "no such method" in the_line(out.stdout, name)


def added_with(instance: str, seams: str = "link") -> Callable:
    def check(out, reader):
        assert out.returncode == 0, out.stderr
        wanted = instance if instance != "<box>" else box_instance(reader.folder)
        assert out.stdout.strip() == f"registered plugin box: seams {seams}, instance {wanted}"
    return check


def check_steps_result(out, reader):
    # "prints the result, the list of one step above"
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"step": "box", "ok": True, "detail": "the box is there"}]


def passes(*ok: str, skipped: tuple = ()) -> Callable:
    def check(out, reader):
        assert out.returncode == 0, (out.stdout, out.stderr)
        found = check_lines(out.stdout)
        assert "FAIL" not in found.values(), out.stdout
        assert all(found[name] == "ok" for name in LOAD_CHECKS + ok), found
        assert all(found[name] == "skip" for name in skipped), found
    return check


def succeeds(out, reader):
    assert out.returncode == 0, out.stderr


def one_check_as_json(out, reader):
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    statuses = {c["name"]: c["status"] for c in document["checks"]}
    assert statuses["link.exec"] == "ok" and "fail" not in statuses.values(), statuses


PROMISES: Dict[int, Dict[str, Callable]] = {
    1: {
        "chmod 755 mu-plugin-box": succeeds,
        "mu plugin test -- ./mu-plugin-box": suite_of_step_1,
    },
    2: {
        'mu plugin add box -- "$PWD/mu-plugin-box"': added_with("default"),
        "mu plugin call box link.checkSteps '{\"phase\": \"reach\"}'": check_steps_result,
    },
    3: {
        "mu plugin test -- ./mu-plugin-box": passes("link.checkSteps", "link.exec", "link.exec.timeout",
                                                    "link.exec.fits", "cancel", "stop.shutdown", "stop.eof",
                                                    skipped=("link.fetch",)),
    },
    4: {
        "mu plugin test -- ./mu-plugin-box": passes("link.exec", "link.fetch"),
        'mu plugin add box -- "$PWD/mu-plugin-box"': added_with("default"),
    },
    5: {
        "mu plugin rm box": succeeds,
        'mu plugin add box -- "$PWD/mu-plugin-box" --box "$PWD/box"': added_with("<box>"),
    },
    6: {
        "mu plugin test box": passes("handshake.recorded", "link.exec", "link.fetch"),
        "mu plugin test box --only link.exec --json": one_check_as_json,
    },
    7: {
        'mu plugin add box -- "$PWD/mu-plugin-box" --box "$PWD/box"': added_with("<box>", "job, link"),
        # "the suite starts a job, runs its bound view ..., reads job.status,
        # asks job.attach, and stops the job three times"
        "mu plugin test box --only job": passes("handshake.recorded", "job.start", "job.start.dedupe", "job.runs",
                                                "job.status", "job.attach", "job.stop", skipped=("job.lookup",)),
    },
}


@pytest.mark.parametrize("step", sorted(PROMISES))
def test_each_step_does_what_it_says(step, tmp_path):
    reader = Reader(tmp_path)
    reader.catch_up(step)
    reader.write(build(step))
    lines = commands(f"step {step}: run")
    assert sorted(lines) == sorted(PROMISES[step]), "the guide's commands for this step changed: pin what they promise"
    for line in lines:
        PROMISES[step][line](reader.run(line), reader)
    assert (reader.folder / PLUGIN).stat().st_mode & 0o777 == 0o755


def test_the_steps_build_the_whole_plugin():
    # "Steps 1 to 5 in one file": the same imports, names and definitions,
    # whatever their order.
    last = max(step for step, _, _ in step_parts())
    assert shape(build(last)) == shape(marked("the whole plugin").body)


def shape(code: str) -> Dict[str, str]:
    """Each top-level statement and each statement of a class, by name."""
    found: Dict[str, str] = {}

    def key(node: ast.stmt, prefix: str) -> str:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            return prefix + node.name
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            return prefix + node.targets[0].id
        return prefix + ast.dump(node)  # imports, the docstring, the main guard: the statement itself

    for node in ast.parse(code).body:
        if isinstance(node, ast.ClassDef):
            for inner in node.body:
                found[key(inner, node.name + ".")] = ast.dump(inner)
            node = ast.ClassDef(node.name, node.bases, node.keywords, [], node.decorator_list)
        found[key(node, "")] = ast.dump(node)
    return found


def test_every_python_block_is_marked():
    # An unmarked fragment is code no test builds or runs: the way step 3
    # once called a method no step had written.
    lines = GUIDE.read_text().splitlines()
    fences = [i for i, line in enumerate(lines) if line == "```python"]
    assert fences
    for i in fences:
        assert _MARK.match(lines[i - 1]), f"docs/writing-plugins.md:{i + 1}: a python block without a marker"
    known = re.compile(r"step \d+: (new file|add to class Box|add to the imports|run|replace .+ with .+)"
                       r"|debug: run|example: procs|the whole plugin")
    for part in guide_parts():
        assert known.fullmatch(part.mark), f"a marker this test does not follow: {part.mark!r}"


def test_the_debugging_commands(tmp_path):
    reader = Reader(tmp_path)
    reader.catch_up(max(PROMISES) + 1)
    reader.write(build(max(PROMISES)))
    lines = commands("debug: run")
    assert len(lines) == 4, lines
    by_hand, traced, show_trace, log = lines
    assert by_hand.startswith(f"echo {shlex.quote(handshake_line())} | "), "not the handshake mu's hint pipes"

    out = reader.run(by_hand)
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)  # one line: the handshake reply, and nothing else on stdout
    assert reply["id"] == 1 and reply["result"]["plugin"]["name"] == "box"
    assert reply["result"]["instance"] == box_instance(reader.folder)

    assert reader.run(traced).returncode == 0
    out = reader.run(show_trace)
    assert out.returncode == 0
    assert re.search(r" box\[\d+\] > \{.*\"method\":\"initialize\"", out.stdout), out.stdout
    assert re.search(r" box\[\d+\] < \{.*\"step\":\"box\"", out.stdout), out.stdout

    out = reader.run(log)
    assert out.returncode == 0
    assert re.search(r" box\[\d+\] start argv=\S*mu-plugin-box --box ", out.stdout), out.stdout
    assert re.search(r" box\[\d+\] call link\.checkSteps .* ok", out.stdout), out.stdout


def test_the_procs_sketch_runs(tmp_path):
    part = marked("example: procs")
    script = tmp_path / "sketch.py"
    script.write_text(part.body)
    out = subprocess.run([sys.executable, str(script)], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "1\nTrue\n"  # what its comments say it prints


# -- the guide's list of names ------------------------------------------------------


def section(title: str) -> str:
    text = GUIDE.read_text()
    start = text.index("\n" + title + "\n")
    level = title.split(" ")[0]
    following = re.search(rf"^#{{1,{len(level)}}} ", text[start + len(title) + 2:], flags=re.M)
    return text[start:start + len(title) + 2 + following.start()] if following else text[start:]


def entries(text: str) -> List[str]:
    """The names a reference section documents: each bold code span."""
    return [m.group(1) for m in re.finditer(r"\*\*`([A-Za-z_][A-Za-z0-9_]*)[^`]*`\*\*", text)]


def test_the_reference_lists_what_mu_sdk_exports():
    listed = entries(section("## Reference: every name `mu.sdk` exports").split("\n### ")[0])
    assert len(listed) == len(set(listed)), listed
    assert sorted(listed) == sorted(sdk.__all__)


def test_the_reference_lists_what_procs_offers():
    public = sorted(name for name, value in vars(procs).items()
                    if not name.startswith("_")
                    and ((inspect.isfunction(value) and value.__module__ == procs.__name__)
                         or (name.isupper() and isinstance(value, (str, int, float)) and not isinstance(value, bool))))
    assert public, "mu.sdk.procs has no public name"
    listed = entries(section("### `mu.sdk.procs`"))
    assert sorted(listed) == public
    assert procs.kill_tree is sdk.kill_tree  # "It is `procs.kill_tree`"


# -- a plugin that fails before its handshake reply ---------------------------------


def plugin_file(tmp_path: Path, name: str, code: str) -> Path:
    path = tmp_path / f"mu-plugin-{name}"
    path.write_text(code)
    path.chmod(0o755)
    return path


GOOD = '''#!/usr/bin/env python3
from mu import sdk


class P(sdk.Plugin):
    name = "NAME"
    version = "1"
    seams = {"link": {"fetch": False, "slots": "self", "remoteOnTimeout": "stopped",
                      "quiescence": "provable", "maxScriptBytes": 1024, "checks": []}}

    @sdk.method("link.checkSteps")
    def check_steps(self, params, call):
        return []


sdk.run(P())
'''

CRASHES_ON_IMPORT = "#!/usr/bin/env python3\nfrom mu import sdk  # noqa\nimport no_such_module_mu_tests_want\n"


def assert_refused_with_hint(out, argv: List[str], hint_start: str) -> List[str]:
    assert out.returncode == 4, (out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 2, out.stderr  # one line of what went wrong, one of remedy: no traceback of mu's
    assert lines[0].startswith("mu: ") and "internal error" not in out.stderr
    hint = lines[1]
    assert hint.startswith("(" + hint_start) and hint.endswith(")"), hint
    assert f"echo {shlex.quote(handshake_line())} | {shlex.join(argv)})" in hint
    return lines


def test_a_plugin_that_crashes_on_import_is_named_with_how_to_see_why(tmp_path):
    path = plugin_file(tmp_path, "crashy", CRASHES_ON_IMPORT)
    argv = [str(path), "--box", str(tmp_path / "a box")]  # a space: the hint quotes it for the shell
    out = run_mu("plugin", "add", "crashy", "--", *argv, env={"PYTHONPATH": str(ROOT)})
    message, hint = assert_refused_with_hint(out, argv, "run it by hand to see all of its stderr: ")
    assert message == ("mu: plugin crashy did not answer the handshake: it exited with status 1: "
                       "Traceback (most recent call last):")
    # protocol "Transport": only stderr's first line reaches the user
    assert "no_such_module_mu_tests_want" not in out.stderr

    # the hint's command is one a reader can paste: it shows the whole traceback
    by_hand = hint[len("(run it by hand to see all of its stderr: "):-1]
    shown = subprocess.run(["bash", "-c", by_hand], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                           capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert "ModuleNotFoundError: No module named 'no_such_module_mu_tests_want'" in shown.stderr


def test_a_registered_plugin_that_now_crashes_gets_the_hint_from_any_verb(tmp_path):
    path = plugin_file(tmp_path, "later", GOOD.replace("NAME", "later"))
    env = {"PYTHONPATH": str(ROOT)}
    assert run_mu("plugin", "add", "later", "--", str(path), env=env).returncode == 0
    path.write_text(CRASHES_ON_IMPORT)
    out = run_mu("plugin", "call", "later", "link.checkSteps", '{"phase": "reach"}', env=env)
    assert_refused_with_hint(out, [str(path)], "run it by hand to see all of its stderr: ")


def test_a_stray_print_before_serving_points_at_the_trace(tmp_path):
    code = GOOD.replace("NAME", "chatty").replace("from mu import sdk\n", "from mu import sdk\n\nprint('starting up')\n")
    path = plugin_file(tmp_path, "chatty", code)
    trace = tmp_path / "chatty.trace"
    out = run_mu("plugin", "add", "chatty", "--", str(path), env={"PYTHONPATH": str(ROOT)})
    message, _ = assert_refused_with_hint(out, [str(path)], "rerun with MU_TRACE=<file> to see the lines it wrote, ")
    assert message.startswith("mu: plugin chatty did not answer the handshake: it broke the protocol: line is not JSON")
    assert "starting up" not in out.stderr  # stdout's lines are the wire's, never shown

    # doing what the hint says shows the line
    out = run_mu("plugin", "add", "chatty", "--", str(path), env={"PYTHONPATH": str(ROOT), "MU_TRACE": str(trace)})
    assert out.returncode == 4
    assert re.search(r" chatty\[\d+\] <! starting up$", trace.read_text(), flags=re.M), trace.read_text()


def test_a_plugin_that_cannot_start_gets_the_hint(tmp_path):
    # a missing interpreter: exec fails, and only a shell run says which one
    path = plugin_file(tmp_path, "nointerp", "#!/nonexistent/python3\n")
    out = run_mu("plugin", "add", "nointerp", "--", str(path))
    message, _ = assert_refused_with_hint(out, [str(path)], "run it by hand to see all of its stderr: ")
    assert message == "mu: plugin nointerp cannot be started: No such file or directory"


def test_the_guide_quotes_the_hint_mu_gives():
    text = section("## Debugging a plugin")
    shown = re.search(r"^```text\n(mu: .*)\n(\(.*\))\n```$", text, flags=re.M)
    assert shown, "the debugging section no longer shows mu's refusal"
    message, hint = shown.groups()
    assert message.startswith("mu: plugin box did not answer the handshake: it exited with status 1: ")
    assert hint.startswith("(" + debug_hint(["x"]).split(" echo ")[0] + " echo '")


def test_the_contract_suite_gives_the_same_hint_for_a_plugin_that_cannot_load(tmp_path):
    path = plugin_file(tmp_path, "crashy", CRASHES_ON_IMPORT)
    out = run_mu("plugin", "test", "--", str(path), env={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 4, out.stderr
    lines = out.stderr.splitlines()
    assert lines[-2].startswith("mu: plugin crashy cannot be loaded: handshake.answer"), out.stderr
    assert lines[-1].startswith("(run it by hand to see all of its stderr: echo "), out.stderr
    assert lines[-1].endswith(f"| {path})"), out.stderr
