"""The demo agent: a tiny turn-taking agent with no model and no network,
run as `mu-bridge demo` (examples/mu-demo-agent is its command; on an SSH
or podman host it travels in the bridge's zipapp).

It is the command a job runs for `--harness demo`, so that the whole agent
path works without a model: it takes each delivery from the job folder's
inbox, does a scripted piece of work in its working directory, and records
a settled turn with its last text.  It keeps the turn files through the
bridge's own turnfiles.TurnFiles (docs/local-provider.md, "Turn files"), so
the demo agent and every harness write them with the same code.

The work of a turn: write turn-<inc>-<n>.md (the message, the steers and
answers it got) in the working directory; when that is a git work tree,
`git add` it and commit.  Lines of a message that start with a directive
script the turn: `/sleep <seconds>` keeps it busy that long first (so a
steer, an interrupt or an abort can meet a busy turn), `/ask <question>`
blocks it until an `answer` delivery (`/ask <question> (<key> | <key>)`
offers those keys: its pending question then ends "(mu answer <agent>
<key> | <key>)", as the harness bridges' do), `/fail <text>` settles it with
that lastError.  `/await <path>` holds the delivery itself back: it stays in
the inbox (and the turns behind it wait too) until that file exists.

It exits 0 on SIGTERM, SIGHUP or SIGINT, and when its inbox folder goes
away; 2 on bad usage.  Standard library only, Python 3.9 or newer; it
imports only turnfiles.py of the package, so it starts light.
"""

import os
import re
import signal
import subprocess
import sys
import time

from .turnfiles import TurnFiles

DIR_VAR = "MU_DEMO_AGENT_DIR"
USAGE = "usage: mu-demo-agent [--dir <folder>] [--poll <seconds>]"
POLL_S = 0.05
MAX_SLEEP_S = 3600.0
GIT_TIMEOUT_S = 60
#: taken at once, even while a turn is under way
CONTROL_KINDS = ("steer", "interrupt", "abort", "answer")
#: each starts a turn, one after the other: they wait in the inbox while one is under way
TURN_KINDS = ("send", "fresh", "command")
KINDS = CONTROL_KINDS + TURN_KINDS
DIRECTIVE = re.compile(r"^/(sleep|ask|fail)(?:[ \t]+(.*))?$")
AWAIT = re.compile(r"^/await[ \t]+(\S.*)$")
ASK_KEYS = re.compile(r"^(.*?)\s*\(([^()|]+(?:\|[^()|]+)+)\)\s*$")  # "<question> (<key> | <key>)"


def now_ms():
    return int(time.time() * 1000)


def say(text):
    sys.stdout.write("mu-demo-agent: %s\n" % text)
    sys.stdout.flush()


# -- the script of a turn --------------------------------------------------------


def script_of(text):
    """(the text without its directives, sleep seconds, question or None,
    failure or None)."""
    kept, sleep, ask, fail = [], 0.0, None, None
    for line in (text or "").splitlines():
        if AWAIT.match(line.strip()):
            continue  # a take's directive, done with once the delivery is taken
        found = DIRECTIVE.match(line.strip())
        if not found:
            kept.append(line)
            continue
        word, rest = found.group(1), (found.group(2) or "").strip()
        if word == "sleep":
            try:
                sleep = min(MAX_SLEEP_S, max(0.0, float(rest)))
            except ValueError:
                kept.append(line)
        elif word == "ask":
            ask = rest or "go on?"
        else:
            fail = rest or "failed as scripted"
    return "\n".join(kept).strip(), sleep, ask, fail


def pending_of(ask):
    """The pending question of `/ask <ask>`: the question alone, or, when
    it ends with keys "(<key> | <key>)", the question and the `mu answer`
    that answers it (the agent's name is $MU_AGENT, which mu gives a job)."""
    found = ASK_KEYS.match(ask)
    if not found:
        return ask
    keys = [k.strip() for k in found.group(2).split("|") if k.strip()]
    agent = os.environ.get("MU_AGENT") or "<agent>"
    return "%s (mu answer %s %s)" % (found.group(1) or "go on?", agent, " | ".join(keys))


def awaited(message):
    """The file a delivery's `/await <path>` line names, or None: the agent
    leaves that delivery in its inbox until the file exists (a test holds a
    take back with it, to meet a race on purpose)."""
    text = message.get("text") if isinstance(message.get("text"), str) else ""
    for line in text.splitlines():
        found = AWAIT.match(line.strip())
        if found:
            return found.group(1).strip()
    return None


def first_line(text, limit=200):
    for line in (text or "").splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[:limit - 3] + "..."
    return "(no text)"


# -- git ---------------------------------------------------------------------------


def git(args, cwd, env=None):
    try:
        return subprocess.run(["git"] + args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None


def git_env(cwd):
    """The environment for git: no prompt, and an identity when git has none."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    name = git(["config", "user.name"], cwd)
    email = git(["config", "user.email"], cwd)
    if "GIT_AUTHOR_NAME" not in env and not (name and name.stdout.strip()):
        env["GIT_AUTHOR_NAME"] = env["GIT_COMMITTER_NAME"] = "mu-demo-agent"
    if "GIT_AUTHOR_EMAIL" not in env and not (email and email.stdout.strip()):
        env["GIT_AUTHOR_EMAIL"] = env["GIT_COMMITTER_EMAIL"] = "mu-demo-agent@localhost"
    return env


def commit(cwd, path, message):
    """Commit `path` when `cwd` is in a git work tree: the new commit's id,
    or "" when there is no work tree or nothing changed (a turn redone
    after a crash).  Raises RuntimeError when git fails."""
    inside = git(["rev-parse", "--is-inside-work-tree"], cwd)
    if inside is None or inside.returncode != 0 or inside.stdout.strip() != b"true":
        return ""
    env = git_env(cwd)
    added = git(["add", "--", path], cwd, env)
    if added is None or added.returncode != 0:
        raise RuntimeError("git add failed: %s" % _err(added))
    staged = git(["diff", "--cached", "--quiet", "--", path], cwd, env)
    if staged is not None and staged.returncode == 0:
        return ""
    done = git(["commit", "-q", "--no-verify", "-m", message, "--", path], cwd, env)
    if done is None or done.returncode != 0:
        raise RuntimeError("git commit failed: %s" % _err(done))
    head = git(["rev-parse", "HEAD"], cwd, env)
    return head.stdout.decode().strip() if head is not None and head.returncode == 0 else ""


def _err(run):
    if run is None:
        return "git did not run"
    return first_line(run.stderr.decode("utf-8", "replace")) if run.stderr else "exit %d" % run.returncode


# -- the agent ---------------------------------------------------------------------


class Agent:
    def __init__(self, folder, workdir, poll_s=POLL_S):
        self.files = TurnFiles(folder)
        self.folder = folder
        self.workdir = workdir
        self.poll_s = poll_s
        self.inbox = self.files.inbox
        self.stopping = None
        self.record = None
        self.until = 0.0  # a sleeping turn's end, on the monotonic clock

    # -- start and the loop ------------------------------------------------------

    def start(self):
        self.files.make()
        record = self.files.record()
        if record is None:
            record = {"state": "idle", "since": now_ms(), "runs": 0, "incarnation": 1, "lastText": None,
                      "settledAt": None, "turn": None}
        record["pid"] = os.getpid()
        self.record = record
        self.save()
        self.put_right()
        turn = record.get("turn")
        if turn:
            say("turn %d.%d resumes after a restart" % (record["incarnation"], turn["n"]))
            self.begin_script(turn)
        say("ready in %s: incarnation %d, %d turns settled" % (self.folder, record["incarnation"], record["runs"]))

    def run(self):
        while self.stopping is None:
            if not os.path.isdir(self.inbox):
                say("the inbox %s is gone; exiting" % self.inbox)
                return 0
            if not self.step():
                time.sleep(self.poll_s)
        say("stopped by signal %d" % self.stopping)
        return 0

    def step(self):
        """One thing to do, if there is one; True if something was done."""
        turn = self.record.get("turn")
        if turn and self.record["state"] == "busy" and time.monotonic() >= self.until:
            self.finish(turn)
            return True
        held = False
        for name, message in self.files.deliveries(KINDS, say):
            msg_id = message["msgId"]
            if self.files.is_taken(msg_id):
                say("message %s was taken already; dropped" % msg_id)
                self.files.unlink(name)
                return True
            kind = message.get("kind", "send")
            if held and kind not in CONTROL_KINDS:
                continue  # a turn waits behind the held one: turns are taken in order
            if awaited(message) is not None and not os.path.exists(awaited(message)):
                held = True  # /await: it stays in the inbox until its file exists
                continue
            if self.record["turn"] is None or kind in CONTROL_KINDS:
                self.take(name, message, kind)
                return True
            # a turn of its own waits for the one under way; a control
            # message behind it may still be taken now
        return False

    # -- taking a delivery -------------------------------------------------------

    def take(self, name, message, kind):
        record = self.record
        before = record["state"]
        taken = {"msgId": message["msgId"], "kind": kind, "at": now_ms(), "state": before}
        turn = record.get("turn")
        text = message.get("text") if isinstance(message.get("text"), str) else ""
        if kind in ("steer", "answer") and turn is not None:
            if kind == "answer" and before != "blocked":
                taken["effect"] = "nothing was pending"
            else:
                key = "steers" if kind == "steer" else "answers"
                value = text if kind == "steer" else _keys(message)
                turn[key].append(value)
                turn["msgIds"].append(message["msgId"])
                taken["effect"] = "joined turn %d" % turn["n"]
                if kind == "answer":
                    self.go_busy(turn)
        elif kind in ("interrupt", "abort") and turn is not None:
            self.settle(turn, error="interrupted" if kind == "interrupt" else "aborted")
            taken["effect"] = "%s turn %d" % ("interrupted" if kind == "interrupt" else "aborted", turn["n"])
            if kind == "interrupt":
                self.new_turn(message, kind, text)
                taken["effect"] += "; began turn %d" % self.record["turn"]["n"]
        elif kind == "abort" or kind == "answer":
            taken["effect"] = "no turn was under way"
        else:
            if kind == "fresh":
                record["incarnation"] += 1
                record.update(runs=0, lastText=None, settledAt=None)
                record.pop("lastError", None)
                say("fresh: incarnation %d" % record["incarnation"])
            self.new_turn(message, kind, text)
            taken["effect"] = "began turn %d" % record["turn"]["n"]
        taken.update(incarnation=record["incarnation"], runs=record["runs"])
        if record.get("turn") is not None:
            taken["turn"] = record["turn"]["n"]
        # the turn record first: from it, the taken record is put right
        # after a crash (put_right); then the delivery leaves the inbox
        record.setdefault("takenLog", [])
        record["takenLog"] = (record["takenLog"] + [taken])[-4:]
        self.save()
        self.files.mark_taken(taken)
        self.files.unlink(name)
        say("took %s (%s): %s" % (message["msgId"], kind, taken["effect"]))
        turn = self.record.get("turn")
        if turn is not None and self.record["state"] == "busy" and not turn.get("scripted"):
            self.begin_script(turn)

    def new_turn(self, message, kind, text):
        if kind == "command":
            name = message.get("name") if isinstance(message.get("name"), str) else "command"
            instructions = message.get("instructions") if isinstance(message.get("instructions"), str) else ""
            text = ("command %s: %s" % (name, instructions)).strip().rstrip(":")
        turn = {"n": self.record["runs"] + 1, "kind": kind, "msgIds": [message["msgId"]], "text": text,
                "steers": [], "answers": [], "startedAt": now_ms()}
        self.record["turn"] = turn
        self.go_busy(turn)

    def go_busy(self, turn):
        self.record.update(state="busy", since=now_ms())
        self.record.pop("pending", None)
        turn.pop("scripted", None)

    def begin_script(self, turn):
        """Start the turn's script: a sleep runs on the loop's clock, an ask
        blocks it until an answer comes."""
        _text, sleep, ask, _fail = script_of(turn["text"])
        turn["scripted"] = True
        if ask is not None and not turn["answers"]:
            self.record.update(state="blocked", since=now_ms(), pending=pending_of(ask))
            self.save()
            say("turn %d.%d is blocked: %s" % (self.record["incarnation"], turn["n"], ask))
            return
        # a turn resumed after a restart sleeps only what is left of it
        left = sleep - max(0.0, time.time() - turn["startedAt"] / 1000.0)
        self.until = time.monotonic() + (max(0.0, left) if not turn["answers"] else 0.0)

    # -- the work and the settle -------------------------------------------------

    def finish(self, turn):
        text, _sleep, _ask, fail = script_of(turn["text"])
        inc = self.record["incarnation"]
        name = "turn-%d-%d.md" % (inc, turn["n"])
        body = ["# Turn %d of incarnation %d" % (turn["n"], inc), "", text or "(no text)"]
        body += ["Steered: " + s for s in turn["steers"]]
        body += ["Answered: " + " ".join(a) for a in turn["answers"]]
        error = fail
        sha = ""
        try:
            with open(os.path.join(self.workdir, name), "w", encoding="utf-8") as f:
                f.write("\n".join(body) + "\n")
            sha = commit(self.workdir, name, "mu-demo-agent: turn %d of incarnation %d" % (turn["n"], inc))
        except (OSError, RuntimeError) as exc:
            error = error or str(exc)
        last = "Turn %d done: wrote %s%s. You said: %s" % (
            turn["n"], name, ", commit %s" % sha[:12] if sha else "", first_line(text))
        if turn["steers"]:
            last += " Steered: %s." % "; ".join(first_line(s, 80) for s in turn["steers"])
        if turn["answers"]:
            last += " Answered: %s." % "; ".join(" ".join(a) for a in turn["answers"])
        self.settle(turn, error=error, text=last)

    def settle(self, turn, error=None, text=None):
        """Settle the turn under way: runs grows by one.  The turn's
        observation is written before the turn record, so a reader that
        sees runs N in turn.json finds turns/<inc>-<N>.json."""
        record = self.record
        at = now_ms()
        record["runs"] += 1
        record.update(state="idle", since=at, settledAt=at, turn=None)
        record.pop("pending", None)
        record["lastText"] = text if text is not None else "Turn %d %s." % (turn["n"], error or "settled")
        if error:
            record["lastError"] = error
        else:
            record.pop("lastError", None)
        self.files.settled(record)
        say("turn %d.%d settled: %s" % (record["incarnation"], record["runs"], record["lastText"]))

    # -- records -----------------------------------------------------------------

    def save(self):
        self.files.save(self.record)

    def put_right(self):
        """After a crash between two writes: the taken records turn.json
        holds and the last settled turn's observation (TurnFiles.put_right),
        and a taken record for each message the open turn joined."""
        self.files.put_right(self.record)
        turn = self.record.get("turn")
        for msg_id in (turn or {}).get("msgIds", []):
            if not self.files.is_taken(msg_id):
                self.files.mark_taken({"msgId": msg_id, "kind": turn["kind"], "at": now_ms(), "state": "busy",
                                       "incarnation": self.record["incarnation"], "runs": self.record["runs"],
                                       "turn": turn["n"], "effect": "joined turn %d" % turn["n"]})


def _keys(message):
    keys = message.get("keys")
    if isinstance(keys, list) and all(isinstance(k, str) for k in keys):
        return keys
    return []


def main(argv: "list[str]") -> int:
    folder = os.environ.get(DIR_VAR) or None
    poll = POLL_S
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            sys.stderr.write(USAGE + "\n")
            return 0
        if arg in ("--dir", "--poll") and args:
            value = args.pop(0)
        elif arg.startswith("--dir=") or arg.startswith("--poll="):
            arg, value = arg.split("=", 1)
        else:
            sys.stderr.write("mu-demo-agent: unknown argument %s\n%s\n" % (arg, USAGE))
            return 2
        if arg == "--dir":
            folder = value
        else:
            try:
                poll = max(0.01, float(value))
            except ValueError:
                sys.stderr.write("mu-demo-agent: --poll takes seconds\n")
                return 2
    if not folder:
        sys.stderr.write("mu-demo-agent: no folder: give --dir or set %s\n%s\n" % (DIR_VAR, USAGE))
        return 2
    agent = Agent(os.path.abspath(folder), os.getcwd(), poll)

    def stop(signum, _frame):
        agent.stopping = signum

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, stop)
    try:
        agent.start()
        return agent.run()
    except OSError as exc:
        if not os.path.isdir(agent.inbox):
            say("the inbox %s is gone; exiting" % agent.inbox)
            return 0
        sys.stderr.write("mu-demo-agent: %s\n" % exc)
        return 1
