"""Panes: a view's command line in a real tmux server of mu's own, or as a
real background process with a log.

Every test runs real processes and leaves none behind: a tmux test gets a
private server (`MU_TMUX_SOCKET` in a folder of its own) that is killed at
its end, and every pane a test opens is closed.  The tmux tests are skipped
only where tmux is missing; CI installs it (.ci/run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List

import pytest
from conftest import ROOT, pid_alive, wait_for

from mu.deadline import Deadline
from mu.errors import EXIT_CALL_FAILED, EXIT_USAGE, UsageError
from mu.panes import PaneError, PaneRef, backend_for, backend_named, choose, view_environment
from mu.panes.headless import HeadlessPanes, log_path
from mu.panes.tmux import TmuxPanes, parse_version, session_name
from mu.runtime import groups

HAS_TMUX = shutil.which("tmux") is not None
needs_tmux = pytest.mark.skipif(not HAS_TMUX, reason="tmux is not installed here (CI installs it: .ci/run)")


def soon(seconds: float = 10.0) -> Deadline:
    return Deadline.after(seconds)


def tmux(socket: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["tmux", "-S", socket, *args], capture_output=True, text=True, timeout=10,
                          stdin=subprocess.DEVNULL)


def kill_server(socket: str) -> None:
    if os.path.exists(socket):
        tmux(socket, "kill-server")


@pytest.fixture
def tmux_socket(monkeypatch: pytest.MonkeyPatch):
    """A private tmux server's socket, in a short folder of its own (a socket
    path must fit in 108 bytes); the server is killed at the end."""
    folder = tempfile.mkdtemp(prefix="mu-tmux-", dir="/tmp")
    socket = os.path.join(folder, "s")
    monkeypatch.setenv("MU_TMUX_SOCKET", socket)
    yield socket
    kill_server(socket)
    shutil.rmtree(folder, ignore_errors=True)


class Views:
    """Opens views through one backend and closes every one at the end."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.refs: List[PaneRef] = []

    def open(self, workstream: str, name: str, command: str, env=None, cwd=None, **kw) -> PaneRef:
        ref = self.backend.open(workstream, name, command, env or {}, cwd, soon(), **kw)
        self.refs.append(ref)
        return ref

    def adopt(self, ref: PaneRef) -> PaneRef:
        self.refs.append(ref)
        return ref

    def close_all(self) -> None:
        for ref in self.refs:
            backend_for(ref).close(ref, soon())


def _views(request, kind: str):
    if kind.startswith("tmux"):
        if not HAS_TMUX:
            pytest.skip("tmux is not installed here (CI installs it: .ci/run)")
        request.getfixturevalue("tmux_socket")
        version = {"tmux": None, "tmux-2.9": (2, 9)}[kind]
        backend = TmuxPanes(version=version)
    else:
        backend = HeadlessPanes()
    views = Views(backend)
    request.addfinalizer(views.close_all)
    return views


@pytest.fixture(params=["tmux", "headless"])
def views(request):
    return _views(request, request.param)


@pytest.fixture
def tmux_views(request):
    return _views(request, "tmux")


def alive(ref: PaneRef) -> bool:
    return backend_for(ref).alive(ref, soon())


def tail(ref: PaneRef, lines: int = 20) -> str:
    return backend_for(ref).tail(ref, lines, soon())


# -- a view's life ---------------------------------------------------------------------


def test_a_view_runs_its_command_and_close_ends_it(views):
    ref = views.open("ws", "a", "echo marker-$MU_AGENT; exec sleep 300")
    assert ref.backend == views.backend.name and ref.pid and ref.started
    assert alive(ref)
    wait_for(lambda: "marker-ws/a" in tail(ref), what="the marker in the view's output")

    views.backend.close(ref, soon())
    assert not pid_alive(ref.pid)
    assert groups.group_empty(ref.pid)
    assert not alive(ref)
    views.backend.close(ref, soon())  # again: nothing to do, no error


def test_a_view_whose_command_exits_is_not_alive_and_keeps_its_output(views):
    ref = views.open("ws", "a", "echo last-words; exit 3")
    wait_for(lambda: not alive(ref), what="the view to end")
    wait_for(lambda: "last-words" in tail(ref), what="a dead view's last output")
    views.backend.close(ref, soon())
    assert not alive(ref)


def test_a_bad_command_still_gives_a_pane_whose_view_dies(views):
    ref = views.open("ws", "a", "no-such-command-for-mu-tests --flag")
    wait_for(lambda: not alive(ref), what="the view to end")
    wait_for(lambda: "not found" in tail(ref), what="the shell's complaint")


def test_a_syntax_error_is_a_dead_view_too(views):
    ref = views.open("ws", "a", "if then fi (")
    wait_for(lambda: not alive(ref), what="the view to end")


def test_close_ends_the_whole_group_even_what_ignores_sigterm(views, tmp_path):
    # The child ignores TERM and HUP: only the SIGKILL after the grace ends it.
    ref = views.open("ws", "a", "(trap '' TERM HUP; : > ready; exec sleep 300) &"
                     " until [ -e ready ]; do sleep 0.01; done; echo $! > child.pid; exec sleep 301",
                     cwd=str(tmp_path))
    wait_for(lambda: (tmp_path / "child.pid").exists() and (tmp_path / "child.pid").read_text().strip(),
             what="the child's pid")
    child = int((tmp_path / "child.pid").read_text())
    assert pid_alive(child) and os.getpgid(child) == ref.pid

    started = time.monotonic()
    views.backend.close(ref, Deadline.after(2))
    assert 0.8 < time.monotonic() - started < 2.5  # one grace (half the time left), then SIGKILL
    assert not pid_alive(child) and not pid_alive(ref.pid)
    assert groups.group_empty(ref.pid)


def test_close_ends_what_a_dead_view_left_in_its_group(views, tmp_path):
    # (In a tmux pane, the leader's exit hangs up its terminal: the child
    # ignores SIGHUP to outlive it, as a daemon-ish helper would.)
    ref = views.open("ws", "a", "(trap '' HUP; : > ready; exec sleep 300) &"
                     " until [ -e ready ]; do sleep 0.01; done; echo $! > child.pid", cwd=str(tmp_path))
    wait_for(lambda: not alive(ref), what="the view's first process to end")
    child = int((tmp_path / "child.pid").read_text())
    assert pid_alive(child)
    views.backend.close(ref, soon())
    assert not pid_alive(child) and groups.group_empty(ref.pid)


def test_env_cwd_and_stdin_reach_the_view(views, tmp_path, monkeypatch):
    check_env_cwd_and_stdin(views, tmp_path, monkeypatch)


@needs_tmux
def test_an_older_tmux_way_gives_the_same_view(request, tmp_path, monkeypatch):
    # Before 3.0 tmux runs one command string with its default-shell: run
    # that way on this newer tmux.
    views = _views(request, "tmux-2.9")
    check_env_cwd_and_stdin(views, tmp_path, monkeypatch)
    second = views.open("ws", "b", "echo second; exec sleep 300")  # new-window, after new-session
    wait_for(lambda: "second" in tail(second), what="the second view's output")


def check_env_cwd_and_stdin(views, tmp_path, monkeypatch):
    work = tmp_path / "work dir"
    work.mkdir()
    monkeypatch.setenv("USER_THING", "from the user")
    monkeypatch.setenv("MU_DB_PATH", str(tmp_path / "db"))  # local-only: never in a view
    monkeypatch.setenv("TMUX", "/tmp/the-users-own-tmux,1,0")  # the user's tmux: never mu's
    ref = views.open(
        "ws", "a",
        "env > env.txt; pwd > pwd.txt; readlink /proc/self/fd/0 > stdin.txt; cat > read.txt;"
        " grep -E '^Sig(Ign|Blk)' /proc/self/status > signals.txt; echo done > done.txt; exec sleep 300",
        env={"FOO": "bar  baz", "QUOTE": "it's \"$HOME\"", "MU_STATE_DIR": "/plugin/says"},
        cwd=str(work),
        mu_env={"MU_CTL_SOCKET": "/run/ctl"},
    )
    wait_for(lambda: (work / "done.txt").exists(), what="the view to write its findings")
    env = dict(line.split("=", 1) for line in (work / "env.txt").read_text().splitlines() if "=" in line)
    assert env["FOO"] == "bar  baz" and env["QUOTE"] == "it's \"$HOME\""
    assert env["MU_AGENT"] == "ws/a" and env["MU_CTL_SOCKET"] == "/run/ctl"
    assert env["USER_THING"] == "from the user"
    assert "MU_STATE_DIR" not in env and "MU_DB_PATH" not in env
    if views.backend.name == "tmux":
        assert env["TERM"].startswith(("tmux", "screen"))  # the pane's terminal, not the user's
        assert env["TMUX"].startswith(ref.where["socket"] + ",")
        assert env["TMUX_PANE"] == ref.where["pane_id"]
    else:
        assert "TMUX" not in env
    assert (work / "pwd.txt").read_text().strip() == str(work)
    assert (work / "stdin.txt").read_text().strip() == "/dev/null"
    assert (work / "read.txt").read_text() == ""
    # No signal blocked, none ignored: not SIGPIPE (which Python ignores),
    # nor SIGTTIN and SIGTTOU (which tmux does).  Signals 32 and 33 are the C
    # library's own (no program may set them, Python's signal module
    # included): whatever mu's parent left on them is not mu's to reset.
    libc_own = (1 << 31) | (1 << 32)
    masks = [int(line.split()[1], 16) for line in (work / "signals.txt").read_text().splitlines()]
    assert [mask & ~libc_own for mask in masks] == [0, 0], [hex(m) for m in masks]
    assert alive(ref)


def test_a_big_environment_reaches_the_view_and_leaves_no_spec_behind(views, tmp_path):
    # More than tmux takes in one command (16 KiB) and than a pipe holds, under
    # Linux's limit for one variable (128 KiB).
    big = "x" * 100_000
    ref = views.open("ws", "a", 'printf "%s" "$BIG" > big.txt; printf "%s" "$ODD" > odd.txt; exec sleep 300',
                     env={"BIG": big, "ODD": "é\tline\nnext 'q' \"$x\""}, cwd=str(tmp_path))
    wait_for(lambda: (tmp_path / "odd.txt").exists(), what="the view to write what it got")
    assert (tmp_path / "big.txt").read_text() == big
    assert (tmp_path / "odd.txt").read_text() == "é\tline\nnext 'q' \"$x\""
    assert alive(ref)
    assert not list((tmp_path / "state" / "panes" / "ws").glob("*.view"))


def test_a_view_the_system_cannot_start_is_dead_and_says_why(views):
    # One variable over Linux's 128 KiB: exec fails after the pane is made.
    ref = views.open("ws", "a", "exec sleep 300", env={"HUGE": "x" * 200_000})
    wait_for(lambda: not alive(ref), what="the view to be dead")
    wait_for(lambda: "mu: the view did not start: Argument list too long" in tail(ref), what="the reason")


def test_tail_reaches_back_past_the_screen(views):
    ref = views.open("ws", "a", "i=1; while [ $i -le 300 ]; do echo line-$i; i=$((i+1)); done; exec sleep 300")
    wait_for(lambda: "line-300" in tail(ref, 5), what="the last line")
    lines = tail(ref, 100).splitlines()
    assert lines == [f"line-{i}" for i in range(201, 301)]


def test_tail_shows_a_panes_text_not_its_terminal_codes(views):
    # colours, a window title and a hidden cursor, as a harness's TUI prints
    # them: the text is what both backends read back
    ref = views.open("ws", "a", r"printf '\033[1;32mgreen\033[0m plain\n\033]0;a title\007after\033[?25lend\n';"
                                " exec sleep 300")
    wait_for(lambda: "end" in tail(ref, 5), what="the output")
    assert [line.rstrip() for line in tail(ref, 5).splitlines() if line.strip()][-2:] == ["green plain", "afterend"]


def test_a_view_outlives_the_process_that_opened_it(views):
    ref = views.adopt(open_elsewhere(views.backend.name, "ws", "a", "exec sleep 300"))
    assert alive(ref)
    assert pid_alive(ref.pid)


def test_a_reused_pid_is_never_taken_for_the_view(views):
    ref = views.open("ws", "a", "exec sleep 300")
    stranger = ref._replace(started=ref.started - 1000)  # same pid, another process's start time
    assert not alive(stranger)
    views.backend.close(stranger, soon())
    assert alive(ref), "closing a ref whose start time differs must not touch the live view"

    me = ref._replace(pid=os.getpid(), started=1.0)  # a live process that is not the view
    assert not alive(me)
    views.backend.close(me, soon())  # signals nothing: this test is still running


def test_a_bad_cwd_fails_the_open_with_one_line_and_leaves_nothing(views, tmp_path):
    with pytest.raises(PaneError) as failed:
        views.open("ws", "a", "exec sleep 300", cwd=str(tmp_path / "missing"))
    assert failed.value.exit_code == EXIT_CALL_FAILED
    assert "\n" not in failed.value.shown and "missing" in failed.value.shown


def test_names_that_cannot_name_a_pane_are_refused(views):
    for workstream, name in [("a:b", "x"), ("ws", "x.y:1"), ("-ws", "x"), ("ws", ""), ("ws", "a/b")]:
        with pytest.raises(UsageError):
            views.open(workstream, name, "true")


# -- tmux ------------------------------------------------------------------------------


def test_one_session_per_workstream_one_window_per_agent(tmux_views, tmux_socket):
    a = tmux_views.open("ws1", "a", "exec sleep 300")
    b = tmux_views.open("ws1", "b", "exec sleep 300")
    c = tmux_views.open("ws2", "a", "exec sleep 300")
    assert a.where["session_id"] == b.where["session_id"] != c.where["session_id"]
    assert len({a.where["window_id"], b.where["window_id"], c.where["window_id"]}) == 3
    assert tmux(tmux_socket, "list-sessions", "-F", "#{session_name}").stdout.split() == ["ws1", "ws2"]
    windows = tmux(tmux_socket, "list-windows", "-t", "=ws1", "-F", "#{window_name} #{window_id}").stdout
    assert windows.splitlines() == [f"a {a.where['window_id']}", f"b {b.where['window_id']}"]

    for ref in (a, b, c):
        tmux_views.backend.close(ref, soon())
    # the last window took its session, and the last session the server
    wait_for(lambda: tmux(tmux_socket, "list-sessions").returncode != 0, what="mu's tmux server to exit")


def test_a_dead_view_keeps_its_window_until_closed(tmux_views, tmux_socket):
    ref = tmux_views.open("ws", "a", "echo bye")
    wait_for(lambda: not alive(ref), what="the view to end")
    panes = tmux(tmux_socket, "list-panes", "-a", "-F", "#{pane_id} #{pane_dead}").stdout.split("\n")
    assert f"{ref.where['pane_id']} 1" in panes
    tmux_views.backend.close(ref, soon())
    assert ref.where["pane_id"] not in tmux(tmux_socket, "list-panes", "-a", "-F", "#{pane_id}").stdout


def test_workstreams_with_dots_get_sessions_of_their_own(tmux_views, tmux_socket):
    dotted = tmux_views.open("a.b", "x", "exec sleep 300")
    plain = tmux_views.open("a_b", "x", "exec sleep 300")
    assert dotted.where["session_id"] != plain.where["session_id"]
    assert session_name("a.b") == "a,b" and dotted.where["session"] == "a,b"
    hint = tmux_views.backend.attach_hint(dotted)
    assert hint == f"tmux -S {tmux_socket} attach -t =a,b:{dotted.where['window_id']}"
    target = hint.split("-t ", 1)[1]
    assert tmux(tmux_socket, "display-message", "-p", "-t", target, "#{window_name}").stdout.strip() == "x"


def test_the_default_server_is_mu_s_own_label(request, monkeypatch):
    folder = tempfile.mkdtemp(prefix="mu-tmuxdir-", dir="/tmp")
    request.addfinalizer(lambda: shutil.rmtree(folder, ignore_errors=True))
    monkeypatch.delenv("MU_TMUX_SOCKET", raising=False)
    monkeypatch.setenv("TMUX_TMPDIR", folder)
    if not HAS_TMUX:
        pytest.skip("tmux is not installed here (CI installs it: .ci/run)")
    socket = os.path.join(folder, f"tmux-{os.getuid()}", "mu")
    request.addfinalizer(lambda: kill_server(socket))
    views = Views(TmuxPanes())
    request.addfinalizer(views.close_all)
    ref = views.open("ws", "a", "exec sleep 300")
    assert ref.where["socket"] == socket and ref.where["label"] == "mu"
    assert os.listdir(os.path.dirname(socket)) == ["mu"]  # no `default` server was made
    assert views.backend.attach_hint(ref) == f"tmux -L mu attach -t =ws:{ref.where['window_id']}"


def test_concurrent_opens_of_a_new_workstream_all_succeed(tmux_views, tmux_socket, tmp_path):
    for round_ in range(3):
        barrier = tmp_path / f"go-{round_}"
        openers = [
            start_elsewhere("tmux", f"race{round_}", f"agent{i}", "exec sleep 300", barrier=str(barrier))
            for i in range(4)
        ]
        time.sleep(0.3)  # let every opener reach the barrier
        barrier.touch()
        refs = [tmux_views.adopt(finish_elsewhere(proc)) for proc in openers]
        assert len({ref.where["session_id"] for ref in refs}) == 1
        names = tmux(tmux_socket, "list-windows", "-t", f"=race{round_}", "-F", "#{window_name}").stdout.split()
        assert sorted(names) == [f"agent{i}" for i in range(4)]
        assert all(alive(ref) for ref in refs)


def test_losing_the_race_to_create_the_session_adds_the_window(tmux_views, tmux_socket, monkeypatch):
    first = tmux_views.open("ws", "a", "exec sleep 300")
    backend = tmux_views.backend
    real_run, real_has = backend._run, backend._has_session
    told = {"new-window": 0, "has-session": 0, "new-session": []}

    def run(server, args, deadline):
        # The first new-window finds no session, as if the other mu had not
        # made it yet...
        if "new-window" in args:
            told["new-window"] += 1
            if told["new-window"] == 1:
                return 1, "", "can't find session: =ws"
        result = real_run(server, args, deadline)
        if "new-session" in args:
            told["new-session"].append(result[0])
        return result

    def has_session(server, session, deadline):
        told["has-session"] += 1
        return False if told["has-session"] == 1 else real_has(server, session, deadline)

    monkeypatch.setattr(backend, "_run", run)
    monkeypatch.setattr(backend, "_has_session", has_session)
    # ...so this mu's new-session meets the session the other made, and must
    # still get its window there.
    second = tmux_views.open("ws", "b", "exec sleep 300")
    assert second.where["session_id"] == first.where["session_id"]
    assert told["new-window"] == 2 and told["has-session"] == 1
    assert len(told["new-session"]) == 1 and told["new-session"][0] != 0  # "duplicate session"


def test_tmux_past_its_deadline_is_one_error_and_leaves_nothing(tmp_path, monkeypatch):
    slow = tmp_path / "bin"
    slow.mkdir()
    (slow / "tmux").write_text("#!/bin/sh\nexec sleep 30\n")
    (slow / "tmux").chmod(0o755)
    monkeypatch.setenv("PATH", f"{slow}{os.pathsep}{os.environ['PATH']}")
    started = time.monotonic()
    with pytest.raises(PaneError) as failed:
        TmuxPanes().open("ws", "a", "true", {}, None, Deadline.after(0.5))
    assert time.monotonic() - started < 3
    assert "deadline" in failed.value.shown and failed.value.exit_code == EXIT_CALL_FAILED


@needs_tmux
def test_a_tmux_failure_is_one_error_line(tmp_path, monkeypatch):
    monkeypatch.setenv("MU_TMUX_SOCKET", str(tmp_path / "no-such-folder" / "s"))
    with pytest.raises(PaneError) as failed:
        TmuxPanes().open("ws", "a", "true", {}, None, soon())
    assert failed.value.exit_code == EXIT_CALL_FAILED
    assert "\n" not in failed.value.shown and failed.value.detail
    assert not list((tmp_path / "state" / "panes" / "ws").glob("*.view"))  # its spec went with it


def test_tmux_versions_parse():
    assert parse_version("tmux 3.3a") == (3, 3)
    assert parse_version("tmux 2.9") == (2, 9)
    assert parse_version("tmux next-3.5") == (3, 5)
    assert parse_version("tmux master") >= (3, 2)


# -- headless --------------------------------------------------------------------------


def test_headless_output_is_appended_to_its_log(tmp_path, request):
    views = _views(request, "headless")
    first = views.open("ws", "a", "echo first")
    assert first.where["log"] == str(tmp_path / "state" / "panes" / "ws" / "a.log") == log_path("ws", "a")
    wait_for(lambda: not alive(first), what="the first view to end")
    second = views.open("ws", "a", "echo second >&2")
    wait_for(lambda: not alive(second), what="the second view to end")
    wait_for(lambda: Path(first.where["log"]).read_text() == "first\nsecond\n", what="both in the log")
    assert views.backend.attach_hint(first) == f"tail -f {first.where['log']}"
    assert oct(os.stat(first.where["log"]).st_mode & 0o777) == oct(0o600)


def test_headless_view_leads_its_own_session(request):
    views = _views(request, "headless")
    ref = views.open("ws", "a", "exec sleep 300")
    assert os.getsid(ref.pid) == ref.pid == os.getpgid(ref.pid)


# -- choosing a backend, and the record ------------------------------------------------


def test_mu_panes_chooses_the_backend(tmp_path, monkeypatch):
    no_tmux = tmp_path / "empty"
    no_tmux.mkdir()
    monkeypatch.delenv("MU_PANES", raising=False)
    assert choose({"PATH": str(no_tmux)}).name == "headless"
    assert choose({"PATH": str(no_tmux), "MU_PANES": "headless"}).name == "headless"
    if HAS_TMUX:
        assert choose().name == "tmux"
        assert choose({"PATH": os.environ["PATH"], "MU_PANES": "tmux"}).name == "tmux"
    for backend in (choose({"PATH": str(no_tmux)}), TmuxPanes()):
        assert backend.runs_commands

    with pytest.raises(UsageError) as bad:
        choose({"PATH": os.environ["PATH"], "MU_PANES": "screen"})
    assert bad.value.exit_code == EXIT_USAGE
    assert bad.value.message == "MU_PANES is 'screen': it must be tmux or headless"
    with pytest.raises(UsageError) as missing:
        choose({"PATH": str(no_tmux), "MU_PANES": "tmux"})
    assert missing.value.exit_code == EXIT_USAGE and "not on PATH" in missing.value.message


def test_a_bad_mu_panes_is_one_clear_line_from_a_process(tmp_path):
    # What mu's command line will do with the error: one line, exit 2.
    script = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "from mu.errors import MuError\n"
        "from mu.panes import choose\n"
        "try:\n    choose()\n"
        "except MuError as e:\n    sys.stderr.write(f'mu: {e.shown}\\n'); sys.exit(e.exit_code)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "MU_PANES": "bogus"},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert out.stderr == "mu: MU_PANES is 'bogus': it must be tmux or headless\n"


def test_a_ref_is_handled_by_the_backend_that_opened_it(monkeypatch):
    tmux_ref = PaneRef("tmux", "ws", "a", 12, 1.5, {"socket": "/x", "pane_id": "%1"})
    headless_ref = PaneRef("headless", "ws", "a", 12, 1.5, {"log": "/x.log"})
    monkeypatch.setenv("MU_PANES", "headless")
    assert backend_for(tmux_ref).name == "tmux"
    monkeypatch.setenv("MU_PANES", "tmux")
    assert backend_for(headless_ref).name == "headless"
    with pytest.raises(PaneError):
        backend_named("headless").alive(tmux_ref, soon())


def test_a_ref_round_trips_through_json_and_a_damaged_one_is_an_error():
    ref = PaneRef("tmux", "ws", "a", 12, 1700000000.25, {
        "socket": "/s", "server_pid": "7", "server_started": "1699999999.5", "session": "ws", "session_id": "$1",
        "window_id": "@2", "pane_id": "%3", "label": "mu",
    })
    assert PaneRef.from_json(ref.to_json()) == ref
    assert json.loads(ref.to_json())["pane_id"] == "%3"
    without = json.loads(ref.to_json())
    del without["pane_id"]
    with pytest.raises(PaneError):
        PaneRef.from_json(json.dumps(without))
    gone = PaneRef("headless", "ws", "a", None, None, {"log": "/l"})
    assert PaneRef.from_json(gone.to_json()) == gone
    for damaged in ["", "[]", "{", '{"backend": "screen", "workstream": "ws", "name": "a"}',
                    '{"backend": "tmux", "workstream": "ws", "name": "a", "pid": "12"}',
                    '{"backend": "tmux", "workstream": "ws", "name": "a", "pid": 1, "socket": 3}']:
        with pytest.raises(PaneError):
            PaneRef.from_json(damaged)


def test_the_view_environment_is_layered(monkeypatch):
    env = view_environment(
        "ws", "a", {"A": "view", "MU_AGENT": "spoofed", "MU_CONFIG": "/x"}, {"MU_CTL_SOCKET": "/c"},
        environ={"A": "user", "B": "user", "MU_STATE_DIR": "/s", "TMUX": "/t,1,0", "TMUX_PANE": "%1"},
    )
    assert env == {"A": "view", "B": "user", "MU_AGENT": "ws/a", "MU_CTL_SOCKET": "/c"}
    with pytest.raises(PaneError):
        view_environment("ws", "a", {"BAD=KEY": "x"}, environ={})


# -- helpers: opening from another process -----------------------------------------------

OPENER = """\
import os, sys, time
sys.path.insert(0, {root!r})
from mu.panes import backend_named
from mu.deadline import Deadline
backend, workstream, name, command, barrier = backend_named(sys.argv[1]), *sys.argv[2:6]
if hasattr(backend, "version"):
    backend.version(Deadline.after(20))  # before the barrier: the race is the opens'
while barrier and not os.path.exists(barrier):
    time.sleep(0.001)
ref = backend.open(workstream, name, command, {{}}, None, Deadline.after(20))
print(ref.to_json())
"""


def start_elsewhere(backend: str, workstream: str, name: str, command: str, barrier: str = "") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", OPENER.format(root=str(ROOT)), backend, workstream, name, command, barrier],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def finish_elsewhere(proc: subprocess.Popen) -> PaneRef:
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return PaneRef.from_json(out)


def open_elsewhere(backend: str, workstream: str, name: str, command: str) -> PaneRef:
    proc = start_elsewhere(backend, workstream, name, command)
    ref = finish_elsewhere(proc)
    assert not pid_alive(proc.pid)  # the opener is gone (and reaped)
    return ref
