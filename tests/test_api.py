"""mu.api, called in this process as embedding tooling calls it (DESIGN
"Embedding"): typed results whose `as_json()` is the verb's --json
document, mu's typed errors with their exit codes, and no plugin process
left running once a function returns."""

from __future__ import annotations

import json
from dataclasses import is_dataclass

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


def test_the_api_page_has_a_row_for_every_function():
    import inspect
    import re

    page = (ROOT / "docs" / "api.md").read_text()
    table = page[page.index("| function | verb | returns |"):]
    table = table[:table.index("\n\n")]
    rows = re.findall(r"^\| `([a-z_]+)\(", table, flags=re.M)
    functions = sorted(n for n in api.__all__ if inspect.isfunction(getattr(api, n)))
    assert sorted(rows) == functions
    headings = "\n".join(line for line in page.splitlines() if line.startswith("### "))
    for name in functions:  # and a section that names it
        assert f"`{name}(" in headings or name in ("send", "command", "interrupt", "abort", "answer",
                                                   "delivery_check"), name


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
