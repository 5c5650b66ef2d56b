"""mu.api, called in this process as embedding tooling calls it
(docs/api.md): typed results whose `as_json()` is the verb's --json
document, mu's typed errors with their exit codes, and no plugin process
left running once a function returns."""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from dataclasses import fields, is_dataclass

import pytest
from agent_commands import ready
from conftest import ROOT, run_mu, wait_for

from mu import api
from mu.errors import NotFound, Refused, UsageError
from mu.runtime.supervisor import supervisor
from mu.store import db, hosts

LOCAL = ROOT / "examples" / "mu-plugin-local"


@pytest.fixture
def box(tmp_path, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    root = tmp_path / "root"
    assert run_mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(root)).returncode == 0
    assert run_mu("host", "acquire", "box", "--provider", "local").returncode == 0
    yield
    for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
        run_mu("agent", "close", agent["agent"])
    run_mu("host", "release", "box")
    db.close()


def test_tasks_through_the_api_match_the_cli():
    task = api.task_add("web", "fix it", brief="the form")
    assert is_dataclass(task) and task.claimed_by is None
    assert [t.id for t in api.task_list()] == [task.id]
    assert json.loads(run_mu("task", "list", "--json").stdout) == [task.as_json()]
    with pytest.raises(UsageError) as bad:
        api.task_add("no such", "x")
    assert bad.value.exit_code == 2
    db.close()


def test_the_life_of_an_agent_through_the_api(box):
    spawned = api.agent_spawn("w/a", "box", command=ready("echo api; sleep 60"), env={"X": "1"})
    assert spawned.agent.agent == "w/a" and spawned.agent.view == "bound" and spawned.key == spawned.agent.job
    assert not supervisor.running()  # the plugin it started is stopped
    wait_for(lambda: api.agent_show("w/a").state == "running", what="the job running")
    wait_for(lambda: "api" in api.agent_read("w/a", 5).output, what="the view's output")
    listed = api.agent_list()
    assert [a.agent for a in listed] == ["w/a"]
    assert json.loads(run_mu("agent", "show", "w/a", "--json").stdout).keys() == listed[0].as_json().keys()
    closed = api.agent_close("w/a")
    assert closed.stopped and closed.as_json() == {"agent": "w/a", "resolved": None, "stopped": True,
                                                   "collected": None, "lost": None}
    assert api.agent_list() == [] and not supervisor.running()
    with pytest.raises(NotFound) as gone:
        api.agent_show("w/a")
    assert gone.value.exit_code == 2


def test_a_host_whose_plugin_has_no_job_seam_is_refused(fake):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    with db.transaction() as conn:  # a provider host of a plugin that declares no job seam
        hosts.insert_acquiring(conn, "plain", "fake", "fake-1", "k-1", {})
        hosts.record_acquired(conn, "plain", {"handle": "h-1"})
    with pytest.raises(Refused) as refused:
        api.agent_spawn("w/a", "plain", command="true")
    assert refused.value.exit_code == 2 and "declares no job seam" in refused.value.message
    assert not supervisor.running()
    db.close()


# -- the page, reattach, read and release (docs/api.md) -------------------------------


PAGE = ROOT / "docs" / "api.md"


def _signature(function) -> str:
    """`name(params)` as docs/api.md writes it: defaults, no annotations."""
    parts, star = [], False
    for p in inspect.signature(function).parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        default = "" if p.default is p.empty else "=" + (f'"{p.default}"' if isinstance(p.default, str)
                                                          else repr(p.default))
        parts.append(p.name + default)
    return f"{function.__name__}({', '.join(parts)})"


def _public_functions():
    return sorted(n for n in api.__all__ if inspect.isfunction(getattr(api, n)))


def _is_result(cls) -> bool:
    """A result type: a frozen dataclass, or a NamedTuple (the agents' results,
    docs/DECISIONS.md "The agents' results are NamedTuples")."""
    return is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields"))


def _field_names(cls) -> set:
    return {f.name for f in fields(cls)} if is_dataclass(cls) else set(cls._fields)


def _result_types():
    return sorted(n for n in api.__all__ if inspect.isclass(getattr(api, n)) and _is_result(getattr(api, n)))


def test_the_api_page_has_a_row_for_every_function_as_it_is():
    page = PAGE.read_text()
    table = page[page.index("| function | verb | returns |"):]
    table = table[:table.index("\n\n")]
    rows = re.findall(r"^\| `([a-z_]+)(\((?:[^()]|\(\))*\))` \| .*? \| `(.+?)` \|$", table, flags=re.M)
    assert sorted(name for name, _, _ in rows) == _public_functions()
    for name, params, returns in rows:
        function = getattr(api, name)
        assert name + params == _signature(function), name
        assert returns == inspect.signature(function).return_annotation, name
    headings = "\n".join(line for line in page.splitlines() if line.startswith("### "))
    for name in _public_functions():  # and a section that names it with its parameters
        assert f"`{_signature(getattr(api, name))}" in headings or f"`{name}(" in headings, name
    for line in headings.splitlines():  # a heading's signature is the function's
        for name, params in re.findall(r"`([a-z_]+)(\((?:[^()]|\(\))*\))", line):  # a default may be ()
            assert name + params == _signature(getattr(api, name)), line


def _type_tables():
    """{type name: [(attribute, json cell)]} from the page's "Result types"."""
    page = PAGE.read_text()
    part = page[page.index("\n## Result types\n"):]
    found = {}
    for block in part.split("\n### `")[1:]:
        name = block[:block.index("`")]
        rows = re.findall(r"^\| `([a-z_0-9]+)` \| (.+?) \| .+ \|$", block, flags=re.M)
        assert rows, name
        found[name] = rows
    return found


def _json_keys(cls) -> set:
    """The keys `cls.as_json()` writes: its dict literals' and `dict(...)`'s."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.as_json)))
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys.update(k.value for k in node.keys if isinstance(k, ast.Constant))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict":
            keys.update(k.arg for k in node.keywords)
    return keys


def test_every_result_field_is_documented_and_every_documented_field_is_one():
    tables = _type_tables()
    assert sorted(tables) == _result_types()
    for name, rows in tables.items():
        cls = getattr(api, name)
        attributes = _field_names(cls)
        attributes |= {n for n, v in vars(cls).items() if isinstance(v, property)}
        documented = [attribute for attribute, _ in rows]
        assert len(documented) == len(set(documented)), name
        assert set(documented) == attributes, name
        in_json = {key for _, cell in rows for span in re.findall(r"`([^`]+)`", cell) for key in span.split(".")}
        assert in_json == _json_keys(cls), name


def test_the_api_page_promises_no_field_that_is_not_there():
    # every `Type.attribute` the prose names is a field or property of it
    page = PAGE.read_text()
    for type_name, attribute in re.findall(r"`([A-Z][A-Za-z]+)\.([a-z_]+)`", page):
        cls = getattr(api, type_name)
        assert attribute in _field_names(cls) | set(dir(cls)), f"{type_name}.{attribute}"


@pytest.fixture
def detached_box(tmp_path, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    root = tmp_path / "root"
    folder = tmp_path / "plugins"
    folder.mkdir(mode=0o700)
    link = folder / "mu-plugin-local-detached"
    link.symlink_to(LOCAL)
    added = run_mu("plugin", "add", "local-detached", "--", str(link), "--root", str(root), "--view", "detached")
    assert added.returncode == 0, added.stderr
    assert run_mu("host", "acquire", "box", "--provider", "local-detached").returncode == 0
    yield
    for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
        run_mu("agent", "close", agent["agent"])
    run_mu("host", "release", "box")
    db.close()


def test_read_reattach_and_release_through_the_api(detached_box):
    api.agent_spawn("w/d", "box", command=ready("echo from the api; sleep 60"))
    wait_for(lambda: "from the api" in api.agent_read("w/d", 5).output, what="the view's output")
    read = api.agent_read("w/d", 5)
    assert read.as_json() == {"agent": read.agent.as_json(), "lines": 5, "output": read.output, "lastText": None}
    assert json.loads(run_mu("agent", "read", "w/d", "-n", "5", "--json").stdout).keys() == read.as_json().keys()
    before = read.agent.pane
    again = api.agent_reattach("w/d")
    assert again.replaced and again.agent.pane != before and again.agent.job == read.agent.job
    assert not supervisor.running()
    with pytest.raises(Refused) as used:
        api.host_release("box")
    assert used.value.exit_code == 2 and "used by 1 agent(s): w/d" in used.value.message
    released = api.host_release("box", force=True)
    assert released.done == "released" and [c.agent for c in released.closed] == ["w/d"]
    assert released.closed[0].stopped
    assert released.as_json() == {"host": "box", "done": "released", "closed": [released.closed[0].as_json()]}
    assert api.agent_list() == [] and not supervisor.running()
    with pytest.raises(NotFound):
        api.agent_reattach("w/d")


# -- the page's example, run for real -------------------------------------------------


def test_the_pages_example_runs_as_written(tmp_path, monkeypatch):
    # against the local provider and the demo agent, from a git checkout of a project
    import os
    import subprocess
    import sys

    page = PAGE.read_text()
    marker = "<!-- api example -->\n```python\n"
    assert page.count(marker) == 1
    code = page[page.index(marker) + len(marker):]
    code = code[:code.index("\n```\n") + 1]
    script = tmp_path / "script.py"
    script.write_text(code)
    project = tmp_path / "project"
    project.mkdir()
    for argv in (["init", "-q"], ["-c", "user.name=me", "-c", "user.email=me@example.invalid", "commit", "-q",
                                  "--allow-empty", "-m", "first"]):
        subprocess.run(["git", *argv], cwd=project, check=True, capture_output=True)
    monkeypatch.setenv("MU_PANES", "headless")
    done = subprocess.run([sys.executable, str(script), str(ROOT)], cwd=project, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), stdin=subprocess.DEVNULL, timeout=180)
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert lines[0].startswith("bound view: "), lines  # headless: the command that shows its log
        assert lines[1:] == ["settled 1", "settled 2", "2 new commits on mu/web/fixer"], lines
        branch = subprocess.run(["git", "log", "--format=%s", "mu/web/fixer"], cwd=project, capture_output=True,
                                text=True, check=True).stdout.splitlines()
        assert branch[:2] == ["mu-demo-agent: turn 2 of incarnation 1", "mu-demo-agent: turn 1 of incarnation 1"]
    finally:
        for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
            run_mu("agent", "close", agent["agent"])
        run_mu("host", "release", "box")
    assert json.loads(run_mu("host", "list", "--json").stdout)["hosts"][0]["state"] == "released"
    db.close()


# -- plugins, hosts and the journal through the API -----------------------------------


def test_plugins_hosts_and_the_log_through_the_api(tmp_path):
    from mu.errors import MuError, TrustError

    root = tmp_path / "root"
    added = api.plugin_add("local", [str(LOCAL), "--root", str(root)])
    assert added.stranded == [] and "job" in added.plugin.seams and not supervisor.running()
    assert api.plugin_list() == [added.plugin] == [api.plugin_show("local")]
    assert json.loads(run_mu("plugin", "show", "local", "--json").stdout) == added.plugin.as_json()
    assert json.loads(run_mu("plugin", "list", "--json").stdout) == {"plugins": [added.plugin.as_json()]}
    with pytest.raises(TrustError) as untrusted:  # refused before anything runs
        api.plugin_add("nope", ["/bin/true"])
    assert untrusted.value.exit_code == 4
    with pytest.raises(UsageError):
        api.plugin_add("nope", [])

    acquired = api.host_acquire("box", provider="local", params={"ttl_ms": "3600000"})
    assert acquired.host.state == "ready" and acquired.resolved == "" and acquired.host.deadline_at is not None
    assert not supervisor.running()
    status = api.host_status("box")
    assert status.status == "up" and status.host.facts["path"].startswith(str(root))
    assert json.loads(run_mu("host", "status", "box", "--json").stdout).keys() == status.as_json().keys()
    profile = api.host_add("near", "local", repo="/nowhere")
    assert profile.jobs and profile.host.kind == "profile" and profile.host.repo == "/nowhere"
    listed = api.host_list()
    assert [h.name for h in listed] == ["box", "near"]
    assert json.loads(run_mu("host", "list", "--json").stdout) == {"hosts": [h.as_json() for h in listed]}

    ran = api.host_exec("box", "echo out; echo err >&2; exit 3")
    assert (ran.exit, ran.stdout, ran.stderr, ran.partial, ran.exit_code) == (3, "out\n", "err\n", False, 3)
    slow = api.host_exec("box", "sleep 5", timeout_ms=200)
    assert slow.exit is None and slow.exit_code == 124 and slow.timed_out.startswith("timed out")
    assert not supervisor.running()
    with pytest.raises(UsageError):
        api.host_exec("box", "true", timeout_ms=0)

    with pytest.raises(Refused) as nothing:
        api.host_settle("box", acquired.host.key, exists=False)
    assert "nothing to settle" in nothing.value.message
    with pytest.raises(Refused):  # a provider host is released before it is forgotten
        api.host_rm("box")
    api.host_release("box")
    assert api.host_rm("box").state == "released" and api.host_rm("near").kind == "profile"
    assert api.host_list() == []
    assert api.plugin_rm("local").name == "local" and api.plugin_list() == []
    with pytest.raises(NotFound):
        api.plugin_show("local")

    entries = api.log(grep=r"^(plugin|host) ")
    texts = [e.text for e in entries]
    assert texts[0].startswith("plugin add local: seams ") and texts[-1] == "plugin rm local", texts
    assert "host rm box" in texts and "host add near --plugin local" in texts
    assert [e.text for e in api.log(grep=r"^(plugin|host) ", last=2)] == texts[-2:]
    assert api.log(after=entries[-1].id, grep=r"^(plugin|host) ") == []
    shown = json.loads(run_mu("log", "--grep", r"^(plugin|host) ", "--json").stdout)["entries"]
    assert shown == [e.as_json() for e in entries]
    with pytest.raises(UsageError):
        api.log(grep="(")
    with pytest.raises(MuError):
        api.log(last=-1)
    db.close()


def test_importing_the_api_loads_no_machinery():
    # a script, or `mu log`, that imports mu.api pays for its types, not for
    # the agents, the runtime or the store: those load when a function needs them
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import mu.api"], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "mu.api" in names
    heavy = sorted(n for n in names if n.startswith(("mu.agents.", "mu.runtime", "mu.rpc", "mu.seams", "mu.effects",
                                                     "mu.panes", "mu.store")) or n in ("sqlite3", "subprocess"))
    assert heavy == []
