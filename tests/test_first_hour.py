"""docs/first-hour.md, run the way its reader runs it: every shell block
marked ``<!-- first hour: run -->``, in the page's order, in one shell that
starts in the checkout, with `mu` on PATH and a real tmux server (the
page's subject is the pane); the python block marked ``<!-- first hour:
python, saved as drive.py -->`` is saved where the shell is when the page
says so.  Each block's output is held to what the text around it says.

The reader's folders are the test's: HOME, the XDG folders and
MU_STATE_DIR are private (conftest.py), and so is the tmux server
(MU_TMUX_SOCKET), whose attach command names its socket rather than
`-L mu`."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

from conftest import ROOT, run_mu
from test_guide import Reader, guide_parts

PAGE = ROOT / "docs" / "first-hour.md"
RUN = "first hour: run"
SAVED = re.compile(r"first hour: python, saved as (\S+)\Z")
SCRIPT_TIMEOUT_S = 240
_SPLIT = "@@ mu first-hour block @@"


def page_blocks() -> List[Tuple[str, str]]:
    """(kind, shell text) for each marked block, in order: `run` blocks as
    they are, a saved python block as the heredoc that saves it."""
    found = []
    for part in guide_parts(PAGE.read_text()):
        saved = SAVED.match(part.mark)
        if part.mark == RUN:
            assert part.lang == "sh", part
            found.append(("run", part.body))
        elif saved:
            assert part.lang == "python", part
            found.append(("saved", f"cat > {saved.group(1)} <<'MU_FIRST_HOUR_EOF'\n{part.body}MU_FIRST_HOUR_EOF\n"))
        else:
            raise AssertionError(f"a marker this test does not follow: {part.mark!r}")
    return found


def test_every_block_of_the_page_is_run():
    # an unmarked block is a command no test runs
    lines = PAGE.read_text().splitlines()
    fences = [i for i, line in enumerate(lines) if re.fullmatch(r"```(sh|python|bash)", line)]
    assert fences
    for i in fences:
        assert lines[i - 1].startswith("<!-- first hour: "), f"docs/first-hour.md:{i + 1}: a block without a marker"
    assert [kind for kind, _ in page_blocks()].count("run") >= 5


def run_the_page(tmp_path: Path, probes: Dict[int, str]) -> List[str]:
    """The page's blocks as one `bash -e` script from the checkout; each
    block's output (stdout and stderr together).  `probes[n]` runs right
    after block n, its output apart (in the list after that block's)."""
    reader = Reader(tmp_path)
    script = ["set -e", f"cd {ROOT}"]
    for n, (_, body) in enumerate(page_blocks()):
        script += [f"echo '{_SPLIT}'", body]
        if n in probes:
            script += [f"echo '{_SPLIT}'", probes[n]]
    done = subprocess.run(["bash", "-c", "\n".join(script)], env=reader.env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL, timeout=SCRIPT_TIMEOUT_S)
    assert done.returncode == 0, done.stdout
    return done.stdout.split(_SPLIT + "\n")[1:]


def _clean_up() -> None:
    """What a failed run left: its agents closed, its hosts released."""
    for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
        run_mu("agent", "close", agent["agent"])
    for host in json.loads(run_mu("host", "list", "--json").stdout or '{"hosts": []}')["hosts"]:
        run_mu("host", "release", host["name"])


def test_the_first_hour_runs_as_written(tmp_path, isolated, tmux_socket):
    my_home = tmp_path / "home"  # conftest's HOME; XDG_STATE_HOME is its state/
    # "your ~/.tmux.conf is not read there": one that would change what the page says
    (my_home / ".tmux.conf").write_text("set -g prefix C-a\nset -g @read-by-mu yes\n")
    blocks = page_blocks()
    runs = [n for n, (kind, _) in enumerate(blocks) if kind == "run"]
    show_block = next(n for n in runs if "mu agent show" in blocks[n][1])
    probe = 'tmux -S "$MU_TMUX_SOCKET" show-options -gv prefix; tmux -S "$MU_TMUX_SOCKET" show-options -gqv @read-by-mu'
    try:
        out = run_the_page(tmp_path, {show_block: probe})
    finally:
        _clean_up()
    said = {}
    at = 0
    for n in range(len(blocks)):
        said[n] = out[at]
        at += 1
        if n == show_block:
            said["probe"] = out[at]
            at += 1
    assert at == len(out)
    host, spawn, show, talk, end, python = (said[n] for n in runs[:6])

    # A host: the local provider's default root, outside MU_STATE_DIR
    assert "acquired host box" in host, host
    path = re.search(r"^  path: (\S+)$", host, flags=re.M).group(1)
    assert path.startswith(str(my_home / "state" / "mu-plugin-local" / "hosts") + "/"), host
    assert not path.startswith(str(isolated))

    # An agent on your project: its first turn
    assert "web/fixer settled: idle, runs 1, incarnation 1" in spawn, spawn
    assert "You said: tidy the readme" in spawn
    assert "next: mu wait web/fixer" in spawn.splitlines(), spawn  # the spawn's next step

    # Looking at its pane: tmux, how to attach, and a server that read no ~/.tmux.conf
    assert re.search(r"pane: tmux, alive; look at it: tmux (-L mu|-S \S+) attach -t =web:@\d+$", show, flags=re.M), show
    assert said["probe"].split() == ["C-b"], said["probe"]  # the person's option is not set there

    # Talking to it, and its commits
    assert "web/fixer settled: idle, runs 2, incarnation 1" in talk, talk
    assert "next: mu wait web/fixer" in talk.splitlines(), talk  # the send's
    assert "mu-demo-agent: turn 2 of incarnation 1" in talk and "closed web/fixer" in talk

    # The log, and the end
    assert "host box: released" in end and "no agents" in end

    # From Python
    settled, branch, entry = python.splitlines()
    assert (settled, branch) == ("web/helper settled 1", "mu/web/helper"), python
    assert entry.startswith("plugin add local: seams ") and "job" in entry, python


def test_the_readme_links_the_page():
    assert "`docs/first-hour.md`" in (ROOT / "README.md").read_text()


def test_the_docs_cite_no_file_the_repository_lacks():
    # "DESIGN" was a file outside the repository: the docs name what is in it
    # (the README, a man page, docs/*.md)
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    pages = [ROOT / name for name in tracked.splitlines()
             if name.endswith((".md", ".py", ".1", ".7")) and name != "tests/test_first_hour.py"]
    citing = [f"{p.relative_to(ROOT)}:{n}" for p in pages for n, line in enumerate(p.read_text().splitlines(), 1)
              if "DESIGN" in line]
    assert citing == []
