"""mu-bridge: a real coding agent behind mu's turn files.

Usage: mu-bridge (claude | codex | pi) [--dir <folder>] [--program <command line>] [--role <role>] [--ask]
                  [--poll <seconds>] [--skill <encoded SKILL.md>] [-- <extra args>]

It runs as a job's process (in its pane).  It starts the harness in its
structured mode as its child, takes deliveries from the job folder's
inbox, and keeps taken/, turn.json and turns/ exactly as the demo agent
does (docs/local-provider.md, "Turn files"), so the local and SSH
providers' channels drive it unchanged.  The pane shows a readable
transcript: each message taken, the agent's text, its tool calls, a
pending question with the `mu answer` that resolves it, each settle.

Claude Code runs as `claude -p --input-format stream-json --output-format
stream-json --verbose --permission-prompt-tool stdio --session-id <id>`
(`--resume <id>` once the session has a transcript); Codex as `codex
app-server` (JSON-RPC: a thread, a turn per message).  The program is
--program, else $MU_HARNESS_CLAUDE or $MU_HARNESS_CODEX, else `claude` or
`codex` on PATH; a command line (split as sh would split it), so it can
carry flags of its own.  Extra args after `--` follow the harness's own.

What a caller may rely on (docs/harnesses.md, "What the bridge writes"):

- turn.json appears only once the harness can take a message (Claude
  answered its `initialize`; Codex started its thread): a job whose turn
  record exists is ready.
- A message is given to the harness with a key derived from its msgId
  (uuid5): Claude's message `uuid`, Codex's `clientUserMessageId`, which
  each keeps in its session's transcript.
- Every settled turn counts (runs + 1), an interrupted or aborted one too,
  with its lastError: `interrupt` and `abort` settle the turn under way
  when they are taken, so a wait on it never hangs.
- A permission the harness asks for (`can_use_tool`) makes the turn
  `blocked` with the question in `pending`; an `answer` delivery whose
  first key is allow/yes/y allows it, deny/no/n denies it; any other keys
  deny it with the keys as the user's reply.  A question (Claude's
  AskUserQuestion, Codex's request_user_input) is `blocked` with its
  options as the keys, and the answer's keys are its answer.
- --role full-access (the default) never stops to ask: Claude runs with
  `--permission-mode bypassPermissions`, Codex with `approvalPolicy:
  never` and `sandbox: danger-full-access`, pi as it is.  --ask is the
  harness's own asking mode instead (Claude's default permission mode,
  Codex's `untrusted`), its permissions `blocked` until answered; pi
  cannot ask, and is refused --ask (exit 2).  --role read-only runs
  Claude with `--permission-mode plan` and Codex with `sandbox:
  read-only`, `approvalPolicy: untrusted`, in its plan mode, --ask or
  not.  A harness's own questions are `blocked` under every role.  A
  Claude that refuses bypassPermissions (as root, outside a sandbox)
  ends the bridge with exit 1 and one line naming why and what to set:
  it never asks instead (docs/harnesses.md, "Roles").
- --skill (a SKILL.md, zlib-compressed then base64, as mu's spawn gives
  it: the host needs no mu) is written under the job folder, never the
  person's configuration nor the working tree, and each harness is told
  of it for its session only: Claude Code with `--plugin-dir` (a plugin
  named mu, so the skill is `mu:mu`), Codex with `skills/extraRoots/set`
  before its thread, pi with `--skill` (docs/harnesses.md, "The mu skill").
- `fresh` starts a new session (a new --session-id) as incarnation + 1.
- A turn the harness begins itself (Claude reporting a background task, a
  pi extension's prompt) is a run like any other: busy, then settled with
  its text, runs + 1; its record has kind "own" and no msgIds.
- The harness's retries of a model it cannot reach are printed to the pane
  and set the open turn's lastError; a turn it gives up on settles with
  its error as lastError (docs/harnesses.md, "When the model cannot be
  reached").
- A harness that exits is started again, resuming its session: the turn
  under way settles with lastError "the harness exited (...)", and the
  incarnation stays.  When it cannot be resumed, a new session starts as
  incarnation + 1 (which `mu wait` reports as restarted).

It exits 0 on SIGTERM, SIGHUP or SIGINT (ending the harness first), and
when its inbox folder goes away; 2 on bad usage.  Standard library only,
Python 3.9 or newer: it imports nothing of mu, so it can run as a single
file on a host that has only python3.
"""

import base64
import binascii
import hashlib
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib

DIR_VAR = "MU_DEMO_AGENT_DIR"  # the local provider names the job folder so (mu/plugins/local/processes.py)
USAGE = ("usage: mu-bridge (claude | codex | pi) [--dir <folder>] [--program <command line>] [--role <role>]"
         " [--ask] [--poll <seconds>] [--skill <encoded SKILL.md>] [-- <extra args>]")
SKILL_NAME = "mu"  # the skill's name in its front matter (mu/SKILL.md)
ROLES = ("full-access", "read-only")  # the JobSpec's roles (docs/harnesses.md, "Roles")
HARNESS_PROGRAMS = {"claude": ("MU_HARNESS_CLAUDE", "claude"), "codex": ("MU_HARNESS_CODEX", "codex"),
                    "pi": ("MU_HARNESS_PI", "pi"), "acp": ("MU_HARNESS_ACP", ""), "qwen": ("MU_HARNESS_QWEN", "qwen")}
POLL_S = 0.05
START_TIMEOUT_S = 60.0  # the harness answers `initialize` within this, or the start failed
RESTARTS = 3  # restarts of a harness that keeps exiting, before the bridge gives up
CONTROL_KINDS = ("steer", "interrupt", "abort", "answer")
TURN_KINDS = ("send", "fresh", "command")
KINDS = CONTROL_KINDS + TURN_KINDS
PLAIN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}\Z")
ALLOW_KEYS = ("allow", "yes", "y")
DENY_KEYS = ("deny", "no", "n")
# The key of a turn the harness began itself (no message asked for it; see
# ("begin", why) below): it is never a message's key (those are uuid5s), and
# such a turn's record has kind "own" and no msgIds.
OWN_KEY = "mu-own-turn"
UUID_SPACE = uuid.UUID("6d750000-6272-6964-6765-000000000001")  # the bridge's uuid5 namespace
# Test-only crash points, as mu's own (mu/runtime/crashpoints.py, which the
# bridge cannot import): MU_CRASH_AT=<point> SIGKILLs the bridge there.
# bridge-recorded: a take is in turn.json, not yet in taken/; bridge-taken:
# in taken/ too, not yet given to the harness; bridge-given: written to the
# harness, nothing after.
CRASH_AT = os.environ.get("MU_CRASH_AT", "")


class BridgeError(Exception):
    """A harness that cannot be started or driven."""


def now_ms():
    return int(time.time() * 1000)


def say(text):
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except OSError:
        pass  # a pane that went away does not stop the agent


def first_line(text, limit=200):
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[:limit - 3] + "..."
    return "(no text)"


def crash_point(name):
    if CRASH_AT == name:
        os.kill(os.getpid(), signal.SIGKILL)


def message_uuid(msg_id):
    """The uuid the harness gets for a delivery's msgId: the same one every time."""
    return str(uuid.uuid5(UUID_SPACE, msg_id))


# -- records (the turn files' rules: temp file and rename) -------------------------


def read_json(path):
    try:
        with open(path, "rb") as f:
            value = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _temp(path, value):
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
    return temp


def write_json(path, value):
    os.replace(_temp(path, value), path)


def create_json(path, value):
    """Write the record only if there is none; True if this call wrote it."""
    temp = _temp(path, value)
    try:
        os.link(temp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(temp)


def taken_name(msg_id):
    if PLAIN_ID.match(msg_id):
        return msg_id
    return "sha256-" + hashlib.sha256(msg_id.encode("utf-8", "surrogatepass")).hexdigest()


# -- the mu skill ----------------------------------------------------------------
#
# One tree under the job folder serves every harness, named for its text's
# hash (so a changed skill is a new tree, and the same one is written once):
#
#   skill-<16 hex>/claude/                      Claude Code's plugin (--plugin-dir):
#       .claude-plugin/plugin.json, skills/mu/SKILL.md
#   skill-<16 hex>/root/mu/SKILL.md             root/ is Codex's extra skill root, root/mu
#                                               pi's --skill
#
# (apart: Codex takes a root beside a Claude plugin's manifest for a plugin,
# and would name the skill mu:mu)


def decode_skill(value):
    """The SKILL.md text of a --skill value, or None when it is not one."""
    try:
        text = zlib.decompress(base64.b64decode(value.encode("ascii"), validate=True)).decode("utf-8")
    except (ValueError, binascii.Error, zlib.error, UnicodeError):
        return None
    return text if text.strip() else None


SKILL_FILES = (("claude", "skills", SKILL_NAME, "SKILL.md"), ("root", SKILL_NAME, "SKILL.md"))


def place_skill(folder, text):
    """The skill's tree under `folder`, written whole (a temporary folder,
    renamed into place) unless it is there already."""
    data = text.encode("utf-8")
    root = os.path.join(folder, "skill-" + hashlib.sha256(data).hexdigest()[:16])
    if all(_file_holds_exactly(os.path.join(root, *path), data) for path in SKILL_FILES):
        return root
    if os.path.isdir(root):  # not what its name says: an edit by hand; put it right
        shutil.rmtree(root, ignore_errors=True)
    temp = tempfile.mkdtemp(dir=folder, prefix=".tmp-skill-")
    try:
        os.makedirs(os.path.join(temp, "claude", ".claude-plugin"))
        with open(os.path.join(temp, "claude", ".claude-plugin", "plugin.json"), "w", encoding="utf-8") as f:
            json.dump({"name": SKILL_NAME, "description": "mu's skill for the agents it starts"}, f)
        for path in SKILL_FILES:
            os.makedirs(os.path.join(temp, *path[:-1]))
            with open(os.path.join(temp, *path), "wb") as f:
                f.write(data)
        try:
            os.rename(temp, root)
        except OSError:  # another bridge of this job put it there first
            if not os.path.isdir(root):
                raise
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return root


def _file_holds_exactly(path, data):
    try:
        with open(path, "rb") as f:
            return f.read() == data
    except OSError:
        return False


# -- the harnesses ---------------------------------------------------------------
#
# Each harness is a child process in its structured mode, read by a thread
# that turns its output into the bridge's own events on `events`, as
# (process, event) pairs:
#
#   ("ready", session)            it can take a message; session: its id
#   ("failed", why)               its start (or resume) failed
#   ("text", text)                the agent said something
#   ("tool", name, input)         the agent runs a tool
#   ("ask", request, tool, input) it asks a permission (or a question)
#   ("done", key, text, error)    the message `key` is done with; text: the turn's result;
#                                 error: why it failed (the harness gave up), or None
#   ("begin", why)                the harness began a turn no message asked for (a
#                                 background task it reports, an extension's prompt):
#                                 its key is OWN_KEY, and its end is ("done", OWN_KEY, ...)
#   ("error", text)               the harness reports trouble it may still get past (a
#                                 retry of the model, a refused connection): for the pane
#                                 and the turn's lastError, the turn stays open
#   ("exit", code)                the process ended


class Harness:
    name = ""

    def __init__(self, program, extra, cwd, events, role="full-access", skill=None, ask=False):
        self.role = role
        self.ask = ask  # --ask: the harness's own asking mode, in place of never asking
        self.skill = skill  # the mu skill's tree (place_skill), or None
        self.program = program
        self.extra = extra
        self.cwd = cwd
        self.events = events
        self.proc = None
        self.stderr_tail = []
        self.stderr_reader = None  # the thread reading its stderr (a failed start waits for its last lines)
        self.lock = threading.Lock()
        self.log_lock = threading.Lock()  # harness.log: its stderr and the lines skipped

    def spawn(self, argv):
        try:
            self.proc = subprocess.Popen(argv, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
        except OSError as exc:
            raise BridgeError("cannot start %s: %s" % (" ".join(self.program), exc.strerror or exc)) from None
        proc = self.proc
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()
        self.stderr_reader = threading.Thread(target=self._errors, args=(proc,), daemon=True)
        self.stderr_reader.start()

    def _read(self, proc):
        """Its stdout, one JSON event a line, until it ends.  Whatever bytes
        the harness prints, this thread neither dies nor stops reading: a
        line that is not a JSON object, or that translate() cannot read, is
        logged (harness.log and the pane) and skipped, and the process's
        exit is always put on `events`, so a turn never waits on a reader
        that is gone (docs/harnesses.md, "What the bridge writes")."""
        try:
            for raw in _lines(proc.stdout):
                self._take(proc, raw)
        except Exception as exc:  # noqa: BLE001 (a read that fails ends the reading, never the exit's report)
            self.skipped("its output could not be read: %s" % (exc,))
        finally:
            try:
                proc.wait()
            finally:
                self.events.put((proc, ("exit", proc.returncode)))

    def _take(self, proc, raw):
        """One line of the harness's output: its events on `events`, or the line skipped."""
        if raw is None:
            self.skipped("a line longer than %d bytes" % MAX_LINE)
            return
        if not raw.strip():
            return
        try:
            message = json.loads(raw.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            self.skipped("a line that is not JSON", raw)
            return
        if not isinstance(message, dict):
            self.skipped("a line that is not a JSON object", raw)
            return
        try:
            found = list(self.translate(message))
        except Exception as exc:  # noqa: BLE001 (an event of a shape not foreseen: skipped, never fatal)
            self.skipped("an event of a shape the bridge cannot read (%s: %s)" % (type(exc).__name__, exc), raw)
            return
        for event in found:
            if _well_formed(event):
                self.events.put((proc, event))
            else:
                self.skipped("an event of a shape the bridge cannot read (%s)" % _brief(list(event), 80), raw)

    def skipped(self, why, raw=b""):
        """Say that a line of the harness's output was skipped: in the pane,
        and in harness.log beside its stderr, with the line's start."""
        shown = raw[:200].decode("utf-8", "replace").rstrip() if raw else ""
        line = "mu-bridge: skipped %s from %s%s" % (why, self.name, ": " + shown if shown else "")
        say(first_line(line, 300))
        folder = os.environ.get(DIR_VAR)
        if not folder:
            return
        try:
            with self.log_lock, open(os.path.join(folder, "harness.log"), "ab") as log:
                log.write(line.encode("utf-8", "replace") + b"\n")
        except OSError:
            pass

    def _errors(self, proc):
        """Its stderr: the last lines kept for a failed start's message, all
        of it appended to harness.log in the job folder (MU_DEMO_AGENT_DIR)."""
        log = None
        folder = os.environ.get(DIR_VAR)
        try:
            log = open(os.path.join(folder, "harness.log"), "ab") if folder else None
        except OSError:
            pass
        try:
            for raw in _lines(proc.stderr):
                raw = raw if raw is not None else b"(a line longer than %d bytes)\n" % MAX_LINE
                self.stderr_tail = (self.stderr_tail + [raw.decode("utf-8", "replace").rstrip()])[-5:]
                if log is not None:
                    try:
                        with self.log_lock:
                            log.write(raw)
                            log.flush()
                    except OSError:
                        pass
        except (OSError, ValueError):
            pass
        finally:
            if log is not None:
                log.close()

    def write(self, value):
        with self.lock:
            try:
                self.proc.stdin.write(json.dumps(value).encode("utf-8") + b"\n")
                self.proc.stdin.flush()
            except (OSError, ValueError, AttributeError):
                pass  # it exited: its end comes as an event

    def mark(self, session):
        """What the bridge keeps, with a turn, for its receipt (pi's; others keep their own)."""
        return None

    def start_failed(self):
        """Why the harness exited at its start, in one line: its last lines
        of stderr (read to their end first), unless the harness knows better."""
        if self.stderr_reader is not None:
            self.stderr_reader.join(2.0)
        return "%s exited at its start: %s" % (self.name, " | ".join(self.stderr_tail) or "no message")

    def stop(self):
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Claude(Harness):
    """`claude -p` in stream-json: the session id is the bridge's choice, a
    message's uuid is its key, `command_lifecycle` says when it is done."""

    name = "claude"

    def start(self, session, resume):
        self.session = session or str(uuid.uuid4())
        self.last_text = None
        self.running = None  # the key of the message Claude started last
        self.own = False  # Claude runs a turn of its own (no message of ours started it)
        self.last_error = None  # why the message Claude started last failed, when it did
        self.notice = None  # what Claude last said ended in the background (its task_notification)
        argv = self.program + ["-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
                               "--permission-prompt-tool", "stdio"]
        argv += ["--resume", self.session] if resume else ["--session-id", self.session]
        if self.role == "read-only":
            argv += ["--permission-mode", "plan"]  # it refuses edits and commands itself
        elif not self.ask:
            argv += ["--permission-mode", "bypassPermissions"]  # full access: it never stops to ask
        if self.skill:
            argv += ["--plugin-dir", os.path.join(self.skill, "claude")]  # for this session only: nothing in ~/.claude
        self.spawn(argv + self.extra)
        self.write({"type": "control_request", "request_id": "mu-init", "request": {"subtype": "initialize"}})

    ROOT_REFUSAL = "cannot be used with root/sudo privileges"  # what Claude Code 2.1 says, as root, to bypassPermissions

    def start_failed(self):
        why = Harness.start_failed(self)
        if self.ROOT_REFUSAL in why:
            # never fall back to asking: the role says it does not ask
            return ("Claude Code refuses bypassPermissions as root: run as another user, or set IS_SANDBOX=1"
                    " in --env if the host is a sandbox")
        return why

    def translate(self, event):
        kind = event.get("type")
        if kind == "control_response" and _dict(event.get("response")).get("request_id") == "mu-init":
            return [("ready", self.session)]
        if kind == "assistant":
            found = []
            for block in _list(_dict(event.get("message")).get("content")):
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and isinstance(block.get("text"), str) and block["text"]:
                    found.append(("text", block["text"]))
                elif block.get("type") == "tool_use":
                    found.append(("tool", block.get("name"), block.get("input")))
            return found
        if kind == "command_lifecycle" and event.get("state") == "started":
            self.running = event.get("command_uuid")
        if kind == "system":
            return self._system(event)
        if kind == "result" and isinstance(event.get("result"), str):
            # is_error: Claude gave up (the model could not be reached, ...): the result is why
            error = first_line(event["result"]) if event.get("is_error") else None
            if self.running is None:
                # a turn of Claude's own (a background task's end): no lifecycle follows it
                found = [] if self.own else [("begin", "claude began a turn of its own")]
                self.own, self.last_text = False, None
                return found + [("done", OWN_KEY, event["result"], error)]
            # the message Claude started last is done with: settle at its result,
            # not at its `completed` a moment later (which then finds it done)
            self.last_text = event["result"]
            self.last_error = error
            if event.get("subtype") == "success":  # an interrupted one ends otherwise
                key, self.running = self.running, None
                text, self.last_text = self.last_text, None
                return [("done", key, text, error)]
        if kind == "command_lifecycle" and event.get("state") in ("completed", "cancelled"):
            text, self.last_text = self.last_text, None
            error, self.last_error = self.last_error, None
            return [("done", event.get("command_uuid"), text, error)]
        if kind == "control_request":
            request = _dict(event.get("request"))
            if request.get("subtype") == "can_use_tool":
                return [("ask", event.get("request_id"), _text(request.get("tool_name")) or "a tool",
                         _dict(request.get("input")))]
        return []

    def _system(self, event):
        """Claude's `system` events: a turn's start (`init`), which begins a
        turn of its own when no message of ours is running; its retries of
        the model (`api_retry`); a background task's end (`task_notification`)."""
        subtype = event.get("subtype")
        if subtype == "task_notification":
            self.notice = first_line(event.get("summary") or "a background task ended")
            return [("text", "(%s)" % self.notice)]
        if subtype == "init" and self.running is None and not self.own:
            self.own = True
            why, self.notice = self.notice, None
            return [("begin", "claude began a turn of its own" + (" after: %s" % why if why else ""))]
        if subtype == "api_retry":
            error = event.get("error_status") or event.get("error") or "unknown"
            delay = event.get("retry_delay_ms")
            return [("error", "the model could not be reached (%s); retry %s of %s%s" % (
                first_line(str(error)), event.get("attempt"), event.get("max_retries"),
                " in %.1f s" % (delay / 1000.0) if isinstance(delay, (int, float)) else ""))]
        return []

    def user(self, key, text, steer=False):
        # a message given during a turn is queued by Claude: a steer is a follow-up there
        self.write({"type": "user", "uuid": key, "session_id": "", "parent_tool_use_id": None,
                    "message": {"role": "user", "content": [{"type": "text", "text": text}]}})

    def interrupt(self):
        self.write({"type": "control_request", "request_id": "mu-int-%d" % now_ms(),
                    "request": {"subtype": "interrupt"}})

    def permit(self, request_id, allow, tool_input, reply, keys=()):
        questions = tool_input.get("questions") if isinstance(tool_input, dict) else None
        if isinstance(questions, list) and keys:
            # AskUserQuestion: allowed, with the answer given as its input's `answers`
            answer = " ".join(keys)
            tool_input = dict(tool_input, answers={q.get("question", ""): answer for q in questions
                                                   if isinstance(q, dict)})
            allow = True
        if allow:
            decision = {"behavior": "allow", "updatedInput": tool_input}
        else:
            decision = {"behavior": "deny", "message": reply or "The user denied this."}
        self.write({"type": "control_response",
                    "response": {"subtype": "success", "request_id": request_id, "response": decision}})

    def _transcripts(self, session):
        base = os.path.join(os.path.expanduser("~"), ".claude", "projects")
        try:
            return [p for p in (os.path.join(base, d, session + ".jsonl") for d in os.listdir(base))
                    if os.path.exists(p)]
        except OSError:
            return []

    def resumable(self, session):
        """Whether Claude keeps a transcript of `session` (so --resume works)."""
        return bool(self._transcripts(session))

    def delivered(self, session, key, turn=None):
        """Whether the session's transcript holds the message's uuid (Claude
        writes it verbatim): the receipt that survives a crash."""
        return any(_file_holds(path, key) for path in self._transcripts(session))


class Codex(Harness):
    """`codex app-server` (JSON-RPC 2.0 over stdio): the session is a thread
    (its id is Codex's), a message's key is its `clientUserMessageId`, and
    `turn/completed` ends every message the turn held."""

    name = "codex"
    NEVER, ASKING = "never", "untrusted"  # approval policies: never ask; ask for what is not known safe
    SANDBOXES = {"full-access": "danger-full-access", "read-only": "read-only"}
    # its model may ask the user (request_user_input) in its default mode too,
    # not only in plan mode: a question is `blocked` under every role
    CONFIG = {"features.default_mode_request_user_input": True}

    def approval(self):
        """full-access asks nothing unless --ask; read-only asks as it always did."""
        return self.ASKING if self.ask or self.role == "read-only" else self.NEVER

    def start(self, session, resume):
        self.thread = session if resume else None
        self.turn = None  # the Codex turn under way
        self.keys = {}  # a Codex turn's id -> the keys it holds
        self.held = []  # turns to start once the one under way completed
        self.texts = {}
        self.steers = {}
        self.spawn(self.program + ["app-server"] + self.extra)
        self.model = None
        self.asked = {}  # a server request's id -> its method
        # the experimental API: read-only runs in Codex's plan mode, the one
        # in which its model may ask the user (request_user_input)
        self.call("mu-init", "initialize", {"clientInfo": {"name": "mu-bridge", "version": "1"},
                                            "capabilities": {"experimentalApi": True}})

    def call(self, rid, method, params):
        self.write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})

    def translate(self, message):
        rid, method, params = message.get("id"), message.get("method"), _dict(message.get("params"))
        if method is None:  # a response to one of ours
            return self._answered(rid, message)
        if rid is not None:  # a request of the server's: an approval or a question
            tool = "shell" if "commandExecution" in method else "edit" if "fileChange" in method else "question"
            shown = {"command": params["command"]} if isinstance(params.get("command"), str) else params
            if method == "item/tool/requestUserInput":
                shown = {"questions": params.get("questions") or []}
            self.asked[rid] = method
            return [("ask", rid, tool, shown)]
        if method == "turn/started":
            self.turn = _dict(params.get("turn")).get("id")
        elif method == "item/started":
            item = _dict(params.get("item"))
            if item.get("type") == "userMessage" and item.get("clientId"):
                keys = self.keys.setdefault(params.get("turnId"), [])
                if item["clientId"] not in keys:
                    keys.append(item["clientId"])
            elif item.get("type") == "commandExecution":
                return [("tool", "shell", {"command": item.get("command")})]
        elif method == "item/completed":
            item = _dict(params.get("item"))
            if item.get("type") == "agentMessage" and item.get("text"):
                self.texts[params.get("turnId")] = item["text"]
                return [("text", item["text"])]
        elif method == "error":
            # Codex's trouble with the model: willRetry, it tries again; else its turn fails next
            error = _dict(params.get("error"))
            why = _error_text(error.get("message"), error.get("additionalDetails"))
            return [("error", ("%s (codex retries)" if params.get("willRetry") else "%s") % why)]
        elif method == "turn/completed":
            turn = _dict(params.get("turn"))
            done = turn.get("id")
            text = self.texts.pop(done, None)
            error = None
            if turn.get("status") == "failed":
                failure = _dict(turn.get("error"))
                error = _error_text(failure.get("message"), failure.get("additionalDetails")) \
                    if failure else "the turn failed"
                text = text if text is not None else "Turn failed: %s" % error
            found = [("done", key, text, error) for key in self.keys.pop(done, [])]
            if self.turn == done:
                self.turn = None
            if self.held and self.turn is None:
                key, text = self.held.pop(0)
                self._start_turn(key, text)
            return found
        return []

    def _answered(self, rid, message):
        result, error = message.get("result"), message.get("error")
        if rid == "mu-init":
            self.write({"jsonrpc": "2.0", "method": "initialized"})
            if self.skill:
                # this server's extra skill root, for its threads: CODEX_HOME stays as it is
                self.call("mu-skills", "skills/extraRoots/set", {"extraRoots": [os.path.join(self.skill, "root")]})
            else:
                self._open_thread()
            return []
        if rid == "mu-skills":
            if error is not None:
                say("mu-bridge: codex did not take the mu skill: %s" % _brief(error))
            self._open_thread()
            return []
        if rid == "mu-thread":
            thread = _dict(_dict(result).get("thread")).get("id")
            if error is not None or not thread:
                return [("failed", "its thread could not start: %s" % _brief(error))]
            self.thread = thread
            self.model = _dict(result).get("model")
            sandbox = _dict(result).get("sandbox") or {}
            say("mu-bridge: codex thread %s: sandbox %s, approvals %s" % (
                thread, sandbox.get("type") if isinstance(sandbox, dict) else sandbox, _dict(result).get("approvalPolicy")))
            return [("ready", thread)]
        if isinstance(rid, str) and rid.startswith("mu-turn-"):
            key = rid[len("mu-turn-"):]
            turn = _dict(_dict(result).get("turn")).get("id")
            if turn:
                self.turn = self.turn or turn
                keys = self.keys.setdefault(turn, [])
                if key not in keys:
                    keys.append(key)
            elif error is not None:
                return [("done", key, "Turn failed: %s" % _brief(error), _brief(error))]
        if isinstance(rid, str) and rid.startswith("mu-steer-") and error is not None:
            # the turn ended before the steer reached it: it is a turn of its own
            key = rid[len("mu-steer-"):]
            self._start_turn(key, self.steers.pop(key, ""))
        return []

    def _open_thread(self):
        # a resumed thread gets the role again: Codex keeps its policy and
        # sandbox, but not the config of the server that started it
        settings = {"approvalPolicy": self.approval(), "sandbox": self.SANDBOXES[self.role], "config": dict(self.CONFIG)}
        if self.thread:
            self.call("mu-thread", "thread/resume", dict(settings, threadId=self.thread))
        else:
            self.call("mu-thread", "thread/start", dict(settings, cwd=self.cwd))

    def _start_turn(self, key, text):
        params = {"threadId": self.thread, "clientUserMessageId": key, "input": [{"type": "text", "text": text}]}
        if self.role == "read-only" and self.model:
            params["collaborationMode"] = {"mode": "plan", "settings": {"model": self.model}}
        self.call("mu-turn-" + key, "turn/start", params)

    def user(self, key, text, steer=False):
        if self.turn is None:
            self._start_turn(key, text)
        elif steer:
            self.steers[key] = text
            self.keys.setdefault(self.turn, []).append(key)
            self.call("mu-steer-" + key, "turn/steer", {"threadId": self.thread, "expectedTurnId": self.turn,
                                                          "clientUserMessageId": key,
                                                          "input": [{"type": "text", "text": text}]})
        else:
            self.held.append((key, text))  # after the turn under way (an interrupt's own turn)

    def interrupt(self):
        if self.turn is not None:
            self.call("mu-int-%d" % now_ms(), "turn/interrupt", {"threadId": self.thread, "turnId": self.turn})

    def permit(self, request_id, allow, tool_input, reply, keys=()):
        if self.asked.pop(request_id, None) == "item/tool/requestUserInput":
            # the answer to each question: the answer's keys (ToolRequestUserInputResponse)
            questions = _list(_dict(tool_input).get("questions"))
            answers = {q.get("id"): {"answers": list(keys)} for q in questions if isinstance(q, dict)}
            self.write({"jsonrpc": "2.0", "id": request_id, "result": {"answers": answers}})
            return
        self.write({"jsonrpc": "2.0", "id": request_id, "result": {"decision": "accept" if allow else "decline"}})

    def _rollouts(self, thread):
        base = os.path.join(os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex"),
                            "sessions")
        found = []
        for folder, _dirs, files in os.walk(base):
            found += [os.path.join(folder, f) for f in files if f.endswith(thread + ".jsonl")]
        return found

    def resumable(self, thread):
        return bool(self._rollouts(thread))

    def delivered(self, thread, key, turn=None):
        """Whether the thread's rollout holds the message's clientUserMessageId."""
        return any(_file_holds(path, key) for path in self._rollouts(thread))


class Pi(Harness):
    """`pi --mode rpc` (JSON lines): the session is pi's session file, a run
    of the agent goes from `agent_start` to `agent_end`, and pi has no
    message id of its own: the bridge keeps the receipt (a `mark` of the
    session file's length taken when the message is taken, before pi has
    it; pi had it when the file holds the message's text past the mark)."""

    name = "pi"

    def start(self, session, resume):
        self.busy = False
        self.keys = []  # the keys of the run under way (or about to start)
        self.held = []  # (key, text) to prompt once the run under way ended
        self.last_text = None
        self.own = False  # the run under way is pi's own (an extension's prompt, no message of ours)
        self.last_error = None  # the run's last assistant message failed with this (stopReason error)
        self.ending = None  # a run that ended in an error: its error, until pi says whether it retries
        argv = self.program + ["--mode", "rpc"]
        if resume:
            argv += ["--session", session]
        if self.skill:
            argv += ["--skill", os.path.join(self.skill, "root", SKILL_NAME)]
        self.spawn(argv + self.extra)
        self.write({"id": "mu-init", "type": "get_state"})

    def translate(self, event):
        kind = event.get("type")
        if kind == "response" and event.get("id") == "mu-init":
            data = _dict(event.get("data"))
            if not event.get("success") or not isinstance(data.get("sessionFile"), str):
                return [("failed", "its state could not be read: %s" % _brief(event.get("error")))]
            return [("ready", data["sessionFile"])]
        if kind == "response" and event.get("success") is False:
            key = event.get("id") or ""
            if key in self.keys:  # a prompt pi refused: done with, as a failed turn
                self.keys.remove(key)
                why = first_line(str(event.get("error")))
                return [("done", key, "Turn failed: %s" % why, why)]
            return []
        if kind == "response" and event.get("id") == "mu-after-end":
            # pi has said by now whether it retries the run that failed (see agent_end)
            if self.ending is not None:
                return self._ended(self.ending)
            return []
        if kind == "agent_start" and not self.keys and not self.busy:
            self.own = self.busy = True
            return [("begin", "pi began a run of its own")]
        if kind == "auto_retry_start":
            self.ending = None
            delay = event.get("delayMs")
            return [("error", "%s; pi retries (%s of %s)%s" % (
                _error_text(event.get("errorMessage")), event.get("attempt"), event.get("maxAttempts"),
                " in %.1f s" % (delay / 1000.0) if isinstance(delay, (int, float)) else ""))]
        if kind == "auto_retry_end":
            if event.get("success") is False:
                self.ending = None
                return self._ended(_error_text(event.get("finalError")))
            return []
        if kind == "message_end":
            message = _dict(event.get("message"))
            if message.get("role") == "assistant":
                texts = [b.get("text") for b in _list(message.get("content"))
                         if isinstance(b, dict) and b.get("type") == "text" and b.get("text")]
                calls = [b for b in _list(message.get("content")) if isinstance(b, dict) and b.get("type") == "toolCall"]
                found = [("text", "\n".join(texts))] if texts else []
                if texts:
                    self.last_text = "\n".join(texts)
                self.last_error = _error_text(message.get("errorMessage")) if message.get("stopReason") == "error" \
                    else None
                return found + [("tool", c.get("name"), c.get("arguments")) for c in calls]
            return []
        if kind == "agent_end":
            if self.last_error is not None:
                # failed: pi may retry it (auto_retry_start), give up (auto_retry_end), or
                # neither; all of it said before it answers the get_state asked now
                self.ending, self.last_error = self.last_error, None
                self.write({"id": "mu-after-end", "type": "get_state"})
                return []
            return self._ended(None)
        return []

    def _ended(self, error):
        """The run is over (with its error, when it failed): its messages are done with."""
        keys, self.keys, self.busy = self.keys + ([OWN_KEY] if self.own else []), [], False
        text, self.last_text, self.own, self.ending = self.last_text, None, False, None
        found = [("done", key, text, error) for key in keys]
        if self.held:
            self._prompt(*self.held.pop(0))
        return found

    def _prompt(self, key, text):
        self.busy = True
        self.keys.append(key)
        self.write({"id": key, "type": "prompt", "message": text})

    def user(self, key, text, steer=False):
        if not self.busy:
            self._prompt(key, text)
        elif steer:
            self.keys.append(key)
            self.write({"id": "mu-steer-" + key, "type": "steer", "message": text})
        else:
            self.held.append((key, text))  # after the run under way (an interrupt's own turn)

    def interrupt(self):
        if self.busy:
            self.write({"id": "mu-abort-%d" % now_ms(), "type": "abort"})

    def permit(self, request_id, allow, tool_input, reply, keys=()):
        pass  # pi asks no permission

    def resumable(self, session):
        return bool(session) and os.path.isfile(session)

    def mark(self, session):
        try:
            return os.path.getsize(session)
        except (OSError, TypeError):
            return 0

    def delivered(self, session, key, turn=None):
        """Whether pi's session file holds the turn's message past the mark
        the bridge took before pi had it."""
        if not turn or not isinstance(turn.get("mark"), int):
            return False
        try:
            with open(session, "rb") as f:
                f.seek(turn["mark"])
                tail = f.read()
        except (OSError, TypeError):
            return False
        return json.dumps(turn.get("text") or "")[1:-1].encode("utf-8") in tail


class Acp(Harness):
    """An agent of the Agent Client Protocol (JSON-RPC 2.0 over its stdio):
    `initialize`, a session (`session/new`, or `session/load` to resume),
    a `session/prompt` per message, settled by the prompt's answer (its
    `stopReason`); `session/update` notifications carry the agent's text
    and tool calls.  ACP gives the client no message id of its own, so the
    receipt is the bridge's, as pi's is: the turn's `mark` is how many user
    messages the session held before this one, and after a restart the
    message was delivered when the session's replay (`session/load` sends
    the history as `user_message_chunk` updates) holds its text past the
    mark.  The client declares no `fs` and no `terminal`: the agent uses
    its own tools.  Requests of the agent's that the bridge does not serve
    are answered -32601.

    A preset names the program and its modes by role: `never` (what
    full-access sets: the agent never asks), `ask` (--ask) and `plan`
    (read-only).  A permission the agent asks anyway is allowed at once
    under full-access; under --ask or read-only it is `blocked`, with the
    options' ids as the keys of `mu answer`."""

    name = "acp"
    ARGS = ()  # what the program needs to speak ACP
    # mode ids by purpose, the first the agent offers wins
    MODES = {"never": ("yolo", "bypassPermissions", "full-access"), "ask": ("default", "ask"),
             "plan": ("plan", "read-only")}

    def start(self, session, resume):
        self.session = session if resume else None
        self.resume = resume
        self.caps = {}
        self.prompt = None  # the key of the prompt under way
        self.held = []  # (key, text) to prompt once the one under way is answered
        self.chunks = []  # the agent's message text of the prompt under way
        self.users = 0  # the user messages the session holds (replayed, then prompted)
        self.replayed = []  # the user messages' texts the agent replayed on load
        self.asked = {}  # a permission request's id -> its options
        self.text = None  # the agent's last message of the prompt under way
        self.spawn(self.program + list(self.ARGS) + self.extra)
        self.call("mu-init", "initialize", {"protocolVersion": 1, "clientInfo": {"name": "mu-bridge", "version": "1"},
                                            "clientCapabilities": {"fs": {"readTextFile": False,
                                                                          "writeTextFile": False},
                                                                   "terminal": False}})

    def call(self, rid, method, params):
        self.write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})

    def notify(self, method, params):
        self.write({"jsonrpc": "2.0", "method": method, "params": params})

    def translate(self, message):
        rid, method = message.get("id"), message.get("method")
        if method is None:
            return self._answered(rid, message)
        params = _dict(message.get("params"))
        if rid is not None:
            return self._asked(rid, method, params)
        if method == "session/update":
            return self._update(_dict(params.get("update")))
        return []

    def _answered(self, rid, message):
        result, error = _dict(message.get("result")), message.get("error")
        if rid == "mu-init":
            if error is not None:
                return [("failed", "it refused initialize: %s" % _brief(error))]
            self.caps = _dict(result.get("agentCapabilities"))
            if self.session and self.caps.get("loadSession"):
                self.call("mu-session", "session/load", {"sessionId": self.session, "cwd": self.cwd, "mcpServers": []})
            else:
                self.session = None
                self.call("mu-session", "session/new", {"cwd": self.cwd, "mcpServers": []})
            return []
        if rid == "mu-session":
            session = result.get("sessionId") or self.session
            if error is not None or not isinstance(session, str) or not session:
                return [("failed", "its session could not start: %s" % _brief(error))]
            self.session = session
            mode, refusal = self._mode(_dict(result.get("modes")))
            if refusal is not None:
                return [("failed", refusal)]
            if mode is not None:
                self.call("mu-mode", "session/set_mode", {"sessionId": session, "modeId": mode})
                return []
            return self._ready()
        if rid == "mu-mode":
            if error is not None:
                return [("failed", "it refused the mode of role %s: %s" % (self._role(), _brief(error)))]
            return self._ready()
        if isinstance(rid, str) and rid.startswith("mu-prompt-"):
            return self._prompted(rid[len("mu-prompt-"):], result, error)
        return []

    def _role(self):
        return "read-only" if self.role == "read-only" else "--ask" if self.ask else "full-access"

    def _mode(self, modes):
        """(the mode to set for the role, or None when there is none to set;
        why the role cannot be had, or None).  full-access without a
        never-ask mode still never asks: its permissions are allowed as they
        come.  --ask and read-only are refused by an agent whose modes hold
        none for them: the bridge never runs a role it cannot keep."""
        offered = [m.get("id") for m in _list(modes.get("availableModes")) if isinstance(m, dict)]
        purpose = "plan" if self.role == "read-only" else "ask" if self.ask else "never"
        found = next((m for m in self.MODES[purpose] if m in offered), None)
        if found is None and purpose != "never" and (offered or purpose == "plan"):
            return None, "it has no mode for %s (its modes: %s)" % (self._role(), ", ".join(map(str, offered)) or "none")
        return (None if found == modes.get("currentModeId") else found), None

    def _ready(self):
        say("mu-bridge: %s session %s (%s)" % (self.name, self.session, self._role()))
        return [("ready", self.session)]

    def _asked(self, rid, method, params):
        if method != "session/request_permission":
            self.write({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found: %s" % method}})
            return []
        options = [o for o in _list(params.get("options")) if isinstance(o, dict) and isinstance(o.get("optionId"), str)]
        call = _dict(params.get("toolCall"))
        if self.role != "read-only" and not self.ask:
            allow = next((o for o in options if str(o.get("kind", "")).startswith("allow")), None)
            if allow is not None:  # full-access: never stop to ask
                self._choose(rid, allow["optionId"])
                say("  allowed: %s" % _brief(call.get("title") or call.get("rawInput"), 200))
                return []
        self.asked[rid] = options
        what = first_line(call["title"], 200) if isinstance(call.get("title"), str) and call["title"].strip() \
            else _brief(call.get("rawInput") or "a tool call", 200)
        question = {"question": "allow %s?" % what, "options": [{"label": o["optionId"]} for o in options]}
        return [("ask", rid, "question", {"questions": [question]})]

    def _choose(self, rid, option):
        outcome = {"outcome": "selected", "optionId": option} if option else {"outcome": "cancelled"}
        self.write({"jsonrpc": "2.0", "id": rid, "result": {"outcome": outcome}})

    def _update(self, update):
        kind = update.get("sessionUpdate")
        content = _dict(update.get("content"))
        if kind == "user_message_chunk" and self.prompt is None:  # the history, replayed on load
            text = content.get("text") if content.get("type") == "text" else None
            if isinstance(text, str):
                self.replayed.append(text)
                self.users += 1
            return []
        if self.prompt is None:
            return []  # a cancelled prompt's last words, or the history's replies
        if kind == "agent_message_chunk" and content.get("type") == "text" and isinstance(content.get("text"), str):
            self.chunks.append(content["text"])
            return []
        if kind == "tool_call":
            return self._said() + [("tool", update.get("title") or update.get("kind") or "tool",
                                    update.get("rawInput") or {})]
        return []

    def _said(self):
        """The agent's text so far, as one event (the pane shows whole messages)."""
        text = "".join(self.chunks).strip()
        self.chunks, self.text = [], text or self.text
        return [("text", text)] if text else []

    def _prompted(self, key, result, error):
        found = self._said()
        text, self.text = self.text, None
        if key != self.prompt:
            return found
        self.prompt = None
        if error is not None:
            why = _brief(error)
            found.append(("done", key, "Turn failed: %s" % why, why))
        else:
            reason = result.get("stopReason")
            failed = None if reason == "end_turn" else str(reason or "no stopReason")
            found.append(("done", key, text, failed))
        if self.held:
            self._prompt(*self.held.pop(0))
        return found

    def _prompt(self, key, text):
        self.prompt = key
        self.chunks, self.text = [], None
        self.users += 1
        self.call("mu-prompt-" + key, "session/prompt",
                  {"sessionId": self.session, "prompt": [{"type": "text", "text": text}]})

    def user(self, key, text, steer=False):
        if self.prompt is None:
            self._prompt(key, text)
        else:
            self.held.append((key, text))  # ACP takes one prompt at a time: a steer is the next one

    def interrupt(self):
        if self.prompt is not None:
            self.held = []
            self.notify("session/cancel", {"sessionId": self.session})

    def permit(self, request_id, allow, tool_input, reply, keys=()):
        options = self.asked.pop(request_id, [])
        ids = [o["optionId"] for o in options]
        if keys and keys[0] in ids:
            return self._choose(request_id, keys[0])
        wanted = "allow" if allow else "reject"
        chosen = next((o["optionId"] for o in options if str(o.get("kind", "")).startswith(wanted)), None)
        self._choose(request_id, chosen)

    def resumable(self, session):
        return bool(session)

    def mark(self, session):
        return self.users

    def delivered(self, session, key, turn=None):
        """Whether the session's replay holds the turn's message past the
        mark taken before the agent had it."""
        if not turn or not isinstance(turn.get("mark"), int):
            return False
        return (turn.get("text") or "") in self.replayed[turn["mark"]:]


class Qwen(Acp):
    """Qwen Code (`qwen --acp`): never-ask is its `yolo` mode, --ask its
    `default`, read-only its `plan`."""

    name = "qwen"
    ARGS = ("--acp",)
    MODES = {"never": ("yolo",), "ask": ("default",), "plan": ("plan",)}


HARNESSES = {"claude": Claude, "codex": Codex, "pi": Pi, "acp": Acp, "qwen": Qwen}


def _file_holds(path, text):
    try:
        with open(path, "rb") as f:
            return text.encode() in f.read()
    except OSError:
        return False


MAX_LINE = 64 << 20  # a longer line of a harness's output is skipped, never held whole
SKIP_PIECE = 64 << 10  # what is read at a time of a line being skipped


def _lines(stream):
    """The stream's lines, as bytes; a line over MAX_LINE is read to its end
    in pieces and given as None (so one huge line never fills memory)."""
    while True:
        line = stream.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            while True:
                more = stream.readline(SKIP_PIECE)
                if not more or more.endswith(b"\n"):
                    break
            yield None
            continue
        yield line


# What each event the readers put on `events` holds (the comment above
# Harness): anything else is a translation of a malformed line, skipped.
_SHAPES = {"ready": (str,), "failed": (str,), "text": (str,), "tool": (object, object),
           "ask": (object, str, object), "done": (str, (str, type(None)), (str, type(None))),
           "begin": (str,), "error": (str,)}


def _dict(value):
    return value if isinstance(value, dict) else {}


def _error_text(message, details=None):
    """One line of a harness's error: its message, and its details when they say more."""
    message = first_line(message) if isinstance(message, str) and message.strip() else "an error"
    if isinstance(details, str) and details.strip() and details.strip() not in message:
        return "%s: %s" % (message, first_line(details))
    return message


def _text(value):
    return value if isinstance(value, str) else ""


def _list(value):
    return value if isinstance(value, list) else []


def _well_formed(event):
    shape = _SHAPES.get(event[0]) if isinstance(event, tuple) and event else None
    if shape is None or len(event) != len(shape) + 1:
        return False
    if event[0] == "ask" and not isinstance(event[1], (str, int)):
        return False
    return all(isinstance(value, kind) for value, kind in zip(event[1:], shape))


def _die_with_parent():
    """In the harness's child, before its exec: on Linux, the kernel sends
    it SIGTERM when the bridge dies, even by SIGKILL (a harness whose stdin
    closed mid-turn keeps working until the turn ends, and a bridge started
    again would then run a second one on the same session; SIGTERM, not
    SIGKILL, so that it saves its transcript first).  Elsewhere, nothing."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: it may still save its session
    except (OSError, AttributeError):
        pass


# -- the bridge --------------------------------------------------------------------


class Bridge:
    def __init__(self, folder, workdir, harness, agent_name="", poll_s=POLL_S):
        self.folder = folder
        self.workdir = workdir
        self.harness = harness
        self.agent_name = agent_name
        self.poll_s = poll_s
        self.events = harness.events
        self.inbox = os.path.join(folder, "inbox")
        self.taken = os.path.join(folder, "taken")
        self.turns = os.path.join(folder, "turns")
        self.turn_path = os.path.join(folder, "turn.json")
        self.stopping = None
        self.record = None
        self.last_text = None  # the harness's result for the turn under way
        self.turn_error = None  # why the turn under way failed, as the harness said at its end
        self.request = None  # the pending permission request: (request_id, input)
        self.restarts = 0

    # -- start ---------------------------------------------------------------------

    def start(self):
        for path in (self.folder, self.inbox, self.taken, self.turns):
            os.makedirs(path, mode=0o700, exist_ok=True)
        record = read_json(self.turn_path)
        if record is None:
            record = {"state": "idle", "since": now_ms(), "runs": 0, "incarnation": 1, "lastText": None,
                      "settledAt": None, "turn": None, "session": None}
        self.record = record
        self.put_right()
        session = record.get("session")
        resume = bool(session) and record.get("harness") == self.harness.name and self.harness.resumable(session)
        if session and not resume:
            self.restart_elsewhere("its session %s could not be resumed" % session)
        record["harness"] = self.harness.name
        try:
            self.launch(session if resume else None, resume)
        except BridgeError as exc:
            if not resume:
                raise
            say("mu-bridge: %s; starting a new session" % exc)
            self.restart_elsewhere("its session %s could not be resumed" % session)
            resume = False
            self.launch(None, False)
        turn = record.get("turn")
        if turn is not None:
            # the bridge restarted mid-turn: the harness got the message (its
            # transcript keeps the key) or it did not (give it again)
            self.resume_turn(turn, resume)
        record["pid"] = os.getpid()
        self.save()  # the turn record exists only once the harness can take a message
        say("mu-bridge: %s ready in %s (session %s, incarnation %d, %d turns settled)" % (
            self.harness.name, self.workdir, record["session"], record["incarnation"], record["runs"]))

    def launch(self, session, resume):
        """Start the harness (resuming `session`, or a new one) and wait
        until it can take a message; the record names its session."""
        self.harness.start(session, resume)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self.stopping is None:
            try:
                proc, event = self.events.get(timeout=0.1)
            except queue.Empty:
                continue
            if proc is not self.harness.proc:
                continue
            if event[0] == "exit":
                raise BridgeError(self.harness.start_failed())
            if event[0] == "failed":
                self.harness.stop()
                raise BridgeError("%s: %s" % (self.harness.name, event[1]))
            if event[0] == "ready":
                self.record["session"] = event[1]
                return
        self.harness.stop()
        raise BridgeError("%s did not answer its start within %d s" % (self.harness.name, START_TIMEOUT_S))

    def resume_turn(self, turn, resumed):
        session = self.record["session"]
        if not turn["msgIds"]:  # the harness's own turn: no message to give again
            self.settle(turn, error="the bridge restarted during the turn")
            return
        if resumed and all(self.harness.delivered(session, message_uuid(m), turn) for m in turn["msgIds"][:1]):
            self.settle(turn, error="the bridge restarted during the turn")
            return
        say("mu-bridge: turn %d.%d is given again after a restart" % (self.record["incarnation"], turn["n"]))
        turn["open"] = [message_uuid(turn["msgIds"][0])]
        self.give(turn["msgIds"][0], turn["text"])

    def restart_elsewhere(self, why):
        """A new incarnation because the session is lost; a turn under way
        is kept, as the new incarnation's first, and given again."""
        kept = self.record.get("turn")
        self.new_incarnation(why)
        if kept is not None and kept["msgIds"]:  # (the harness's own turn ended with its session)
            kept["n"] = 1
            self.record["turn"] = kept
            self.go_busy()

    def new_incarnation(self, why):
        record = self.record
        record["incarnation"] += 1
        record.update(runs=0, lastText=None, settledAt=None, turn=None, state="idle", since=now_ms())
        record.pop("lastError", None)
        record.pop("pending", None)
        say("mu-bridge: incarnation %d (%s)" % (record["incarnation"], why))

    # -- the loop ------------------------------------------------------------------

    def run(self):
        while self.stopping is None:
            if not os.path.isdir(self.inbox):
                say("mu-bridge: the inbox %s is gone; exiting" % self.inbox)
                break
            did = self.step()
            try:
                proc, event = self.events.get(timeout=0 if did else self.poll_s)
            except queue.Empty:
                continue
            if proc is self.harness.proc:
                self.on_event(event)
        if self.stopping is not None:
            say("mu-bridge: stopped by signal %d" % self.stopping)
        self.harness.stop()
        return 0

    def step(self):
        """Take one delivery, if one can be taken now; True if one was."""
        for name, message in self.deliveries():
            msg_id = message["msgId"]
            if os.path.exists(os.path.join(self.taken, taken_name(msg_id) + ".json")):
                self.unlink(name)
                return True
            kind = message.get("kind", "send")
            if self.record["turn"] is None or kind in CONTROL_KINDS:
                self.take(name, message, kind)
                return True
        return False

    def deliveries(self):
        try:
            names = [n for n in os.listdir(self.inbox) if n.endswith(".json") and not n.startswith(".")]
        except OSError:
            return []
        found = []
        for name in names:
            message = read_json(os.path.join(self.inbox, name))
            kind = (message or {}).get("kind", "send")
            if not message or not isinstance(message.get("msgId"), str) or not message["msgId"] or kind not in KINDS:
                say("mu-bridge: inbox/%s is not a delivery; set aside" % name)
                try:
                    os.replace(os.path.join(self.inbox, name), os.path.join(self.inbox, ".bad-" + name))
                except OSError:
                    pass
                continue
            at = message.get("at")
            found.append(((at if isinstance(at, int) and not isinstance(at, bool) else 0, name), name, message))
        return [(name, message) for _key, name, message in sorted(found, key=lambda f: f[0])]

    # -- taking a delivery ---------------------------------------------------------

    def take(self, name, message, kind):
        record = self.record
        before = record["state"]
        taken = {"msgId": message["msgId"], "kind": kind, "at": now_ms(), "state": before}
        turn = record.get("turn")
        text = message.get("text") if isinstance(message.get("text"), str) else ""
        say("> [%s] %s%s" % (message["msgId"], "" if kind == "send" else kind + ": ", first_line(text) if text
                             else " ".join(_keys(message)) or message.get("name") or ""))
        after = None  # what to tell the harness once the records hold the take
        if kind == "steer" and turn is not None:
            turn["steers"].append(text)
            turn["msgIds"].append(message["msgId"])
            turn["open"].append(message_uuid(message["msgId"]))
            taken["effect"] = "joined turn %d" % turn["n"]
            after = ("steer", message["msgId"], text)
        elif kind == "answer":
            if turn is not None and before == "blocked" and self.request is not None:
                turn["answers"].append(_keys(message))
                turn["msgIds"].append(message["msgId"])
                self.go_busy()
                taken["effect"] = "joined turn %d" % turn["n"]
                after = ("answer", self.request, _keys(message))
                self.request = None
            else:
                taken["effect"] = "nothing was pending"
        elif kind in ("interrupt", "abort") and turn is not None:
            error = "interrupted" if kind == "interrupt" else "aborted"
            self.settle(turn, error=error)
            taken["effect"] = "%s turn %d" % (error, turn["n"])
            after = ("interrupt",)
            if kind == "interrupt":
                self.new_turn(message, kind, text)
                taken["effect"] += "; began turn %d" % record["turn"]["n"]
                after = ("interrupt-then", message["msgId"], text)
        elif kind == "abort":
            taken["effect"] = "no turn was under way"
        else:
            if kind == "fresh":
                self.harness.stop()
                self.drain()
                self.new_incarnation("fresh")
                self.launch(None, False)
            self.new_turn(message, kind, text)
            taken["effect"] = "began turn %d" % record["turn"]["n"]
            after = ("user", message["msgId"], record["turn"]["text"])
        taken.update(incarnation=record["incarnation"], runs=record["runs"])
        if record.get("turn") is not None:
            taken["turn"] = record["turn"]["n"]
        record["takenLog"] = (record.get("takenLog", []) + [taken])[-4:]
        self.save()
        crash_point("bridge-recorded")
        create_json(os.path.join(self.taken, taken_name(message["msgId"]) + ".json"), taken)
        self.unlink(name)
        crash_point("bridge-taken")
        if after is None:
            return
        if after[0] in ("user", "steer"):
            self.give(after[1], after[2], steer=after[0] == "steer")
            crash_point("bridge-given")
        elif after[0] == "answer":
            (request_id, tool_input), keys = after[1], after[2]
            allow = keys[0].lower() in ALLOW_KEYS
            reply = None if allow or keys[0].lower() in DENY_KEYS else "The user answered: %s" % " ".join(keys)
            question = isinstance(tool_input, dict) and isinstance(tool_input.get("questions"), list)
            self.harness.permit(request_id, allow, tool_input, reply, keys if question else ())
            say("  answered: %s" % (" ".join(keys) if question else "allow" if allow else reply or "deny"))
        else:
            self.harness.interrupt()
            if after[0] == "interrupt-then":
                self.give(after[1], after[2])

    def give(self, msg_id, text, steer=False):
        self.harness.user(message_uuid(msg_id), text, steer)

    def new_turn(self, message, kind, text):
        if kind == "command":
            name = message.get("name") if isinstance(message.get("name"), str) else "command"
            instructions = message.get("instructions") if isinstance(message.get("instructions"), str) else ""
            text = ("/%s %s" % (name, instructions)).strip()
        # open: the keys of the messages the harness is not done with
        self.record["turn"] = {"n": self.record["runs"] + 1, "kind": kind, "msgIds": [message["msgId"]],
                               "text": text, "steers": [], "answers": [], "startedAt": now_ms(),
                               "open": [message_uuid(message["msgId"])]}
        mark = self.harness.mark(self.record.get("session"))
        if mark is not None:
            self.record["turn"]["mark"] = mark  # taken before the harness has the message
        self.go_busy()

    def go_busy(self):
        self.record.update(state="busy", since=now_ms())
        self.record.pop("pending", None)

    # -- the harness's events --------------------------------------------------------

    def on_event(self, event):
        kind = event[0]
        turn = self.record.get("turn")
        if kind == "exit":
            self.harness_exited(event[1])
        elif kind == "text":
            say("  %s: %s" % (self.harness.name, event[1]))
        elif kind == "tool":
            say("  tool %s: %s" % (event[1], _brief(event[2])))
        elif kind == "begin":
            self.own_turn(event[1])
        elif kind == "error":
            say("  %s: %s" % (self.harness.name, event[1]))
            if turn is not None:  # the turn stays open: the harness may yet get past it
                self.record["lastError"] = event[1]
                self.save()
        elif kind == "done":
            if turn is not None and event[1] in turn["open"]:
                turn["open"].remove(event[1])
                if event[2] is not None:
                    self.last_text = event[2]
                if event[3] is not None:
                    self.turn_error = event[3]
                if not turn["open"]:
                    error = self.turn_error
                    text = self.last_text if self.last_text is not None or error is None \
                        else "Turn %d failed: %s" % (turn["n"], error)
                    self.settle(turn, text=text, error=error)
        elif kind == "ask":
            if turn is None:
                self.harness.permit(event[1], False, None, "No turn is under way.")
            else:
                self.block(event[1], event[2], event[3])

    def own_turn(self, why):
        """A turn the harness began itself (no message asked for it): a run
        like any other, busy until its end (its key is OWN_KEY; its record
        has kind "own" and no msgIds).  When a turn is under way already, the
        harness's own work joins it, and it settles once both are done."""
        turn = self.record.get("turn")
        if turn is not None:
            if OWN_KEY not in turn["open"]:
                turn["open"].append(OWN_KEY)
            say("  (%s, within turn %d)" % (why, turn["n"]))
            return
        self.record["turn"] = {"n": self.record["runs"] + 1, "kind": "own", "msgIds": [], "text": "",
                               "steers": [], "answers": [], "startedAt": now_ms(), "open": [OWN_KEY]}
        self.go_busy()
        self.save()
        say("> (%s: turn %d.%d)" % (why, self.record["incarnation"], self.record["turn"]["n"]))

    def block(self, request_id, tool, tool_input):
        questions = tool_input.get("questions") if isinstance(tool_input, dict) else None
        if tool in ("AskUserQuestion", "question") and isinstance(questions, list):
            asked = [q for q in questions if isinstance(q, dict)]
            question = "%s asks: %s" % (self.harness.name, " / ".join(first_line(q.get("question"), 150) for q in asked))
            labels = [o.get("label") for q in asked[:1] for o in _list(q.get("options"))
                      if isinstance(o, dict) and isinstance(o.get("label"), str)]
            keys = " | ".join(labels) if labels else "<your answer>"
        elif tool in ("AskUserQuestion", "question"):
            question = "%s asks: %s" % (self.harness.name, _brief(tool_input, 300))
            keys = "<your answer>"
        else:
            question = "%s wants to %s" % (tool, _brief(tool_input, 300))
            keys = "allow | deny"
        target = self.agent_name or "<agent>"
        self.request = (request_id, tool_input)
        self.record.update(state="blocked", since=now_ms(),
                           pending="%s (mu answer %s %s)" % (question, target, keys))
        self.save()
        say("  ? %s\n    answer with: mu answer %s %s" % (question, target, keys))

    def drain(self):
        """Forget the events of a harness that was ended on purpose."""
        while True:
            try:
                self.events.get_nowait()
            except queue.Empty:
                return

    def harness_exited(self, code):
        """Start the harness again on its session.  The turn under way settles
        with the exit as its error when the harness had its message (the
        receipt: its transcript holds the key); when it never had it (it died
        with the message still in its pipe), the message is given again, so
        a harness's crash loses no message and none is given twice."""
        say("mu-bridge: %s exited (%s)" % (self.harness.name, code))
        self.request = None
        session = self.record["session"]
        turn = self.record.get("turn")
        if turn is not None and (not turn["msgIds"] or self._had_it(session)):
            # its own turn ends with it; a receipt in its own files answers now
            self.settle(turn, error="the harness exited (%s)" % code)
        self.restarts += 1
        if self.restarts > RESTARTS:
            raise BridgeError("%s keeps exiting; giving up after %d restarts" % (self.harness.name, RESTARTS))
        resumed = True
        try:
            self.launch(session, self.harness.resumable(session))
        except BridgeError as exc:
            say("mu-bridge: %s; starting a new session" % exc)
            self.restart_elsewhere("the session could not be resumed")
            self.launch(None, False)
            resumed = False
        if resumed and self._had_it(session):  # one the resumed harness gives (an ACP agent's replay)
            self.settle(self.record["turn"], error="the harness exited (%s)" % code)
        turn = self.record.get("turn")
        if turn is not None:  # it never had the message: given again, once
            say("mu-bridge: turn %d.%d is given again: %s never had it" % (
                self.record["incarnation"], turn["n"], self.harness.name))
            turn["open"] = [message_uuid(turn["msgIds"][0])]
            self.give(turn["msgIds"][0], turn["text"])
        self.save()

    def _had_it(self, session):
        """Whether the harness had the open turn's first message (its receipt)."""
        turn = self.record.get("turn")
        return turn is not None and bool(turn["msgIds"]) and \
            self.harness.delivered(session, message_uuid(turn["msgIds"][0]), turn)

    # -- the settle ------------------------------------------------------------------

    def settle(self, turn, error=None, text=None):
        record = self.record
        at = now_ms()
        record["runs"] += 1
        record.update(state="idle", since=at, settledAt=at, turn=None)
        record.pop("pending", None)
        self.request = None
        self.last_text = None
        self.turn_error = None
        record["lastText"] = text if text is not None else "Turn %d %s." % (turn["n"], error or "settled")
        if error:
            record["lastError"] = error
        else:
            record.pop("lastError", None)
        path = os.path.join(self.turns, "%d-%d.json" % (record["incarnation"], record["runs"]))
        write_json(path, self.observation())
        self.save()
        say("= turn %d.%d settled%s: %s" % (record["incarnation"], record["runs"],
                                          " (%s)" % error if error else "", first_line(record["lastText"])))

    def observation(self):
        record = self.record
        seen = {"status": "idle", "settled": True, "since": record["settledAt"], "runs": record["runs"],
                "incarnation": record["incarnation"], "lastText": record["lastText"] or ""}
        if record.get("lastError"):
            seen["lastError"] = record["lastError"]
        return seen

    def save(self):
        write_json(self.turn_path, self.record)

    def put_right(self):
        """After a crash between two writes: the taken records turn.json holds."""
        for taken in self.record.get("takenLog") or []:
            create_json(os.path.join(self.taken, taken_name(taken["msgId"]) + ".json"), taken)
        if self.record["runs"] > 0 and self.record.get("settledAt") is not None:
            path = os.path.join(self.turns, "%d-%d.json" % (self.record["incarnation"], self.record["runs"]))
            if not os.path.exists(path):
                write_json(path, self.observation())

    def unlink(self, name):
        try:
            os.unlink(os.path.join(self.inbox, name))
        except OSError:
            pass


def _keys(message):
    keys = message.get("keys")
    if isinstance(keys, list) and keys and all(isinstance(k, str) and k for k in keys):
        return keys
    return ["deny"]


def _brief(value, limit=200):
    if isinstance(value, dict) and isinstance(value.get("command"), str):
        return "run: " + first_line(value["command"], limit)
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = str(value)
    return first_line(text, limit)


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stderr.write(USAGE + "\n")
        return 0 if args else 2
    harness = args.pop(0)
    if harness not in HARNESS_PROGRAMS:
        sys.stderr.write("mu-bridge: no harness %r (the harnesses: %s)\n%s\n" % (
            harness, ", ".join(sorted(HARNESS_PROGRAMS)), USAGE))
        return 2
    variable, default = HARNESS_PROGRAMS[harness]
    folder = os.environ.get(DIR_VAR) or None
    program = os.environ.get(variable) or default
    poll = POLL_S
    role = "full-access"
    ask = False
    skill = None
    extra = []
    while args:
        arg = args.pop(0)
        if arg == "--":
            extra = args
            break
        if arg == "--ask":
            ask = True
            continue
        if arg in ("--dir", "--program", "--role", "--poll", "--skill") and args:
            value = args.pop(0)
        else:
            sys.stderr.write("mu-bridge: unknown argument %s\n%s\n" % (arg, USAGE))
            return 2
        if arg == "--dir":
            folder = value
        elif arg == "--program":
            program = value
        elif arg == "--role":
            if value not in ROLES:
                sys.stderr.write("mu-bridge: --role must be one of %s, not %s\n" % (", ".join(ROLES), value))
                return 2
            role = value
        elif arg == "--skill":
            skill = decode_skill(value)
            if skill is None:
                sys.stderr.write("mu-bridge: --skill takes a SKILL.md compressed with zlib, then base64\n")
                return 2
        else:
            try:
                poll = max(0.01, float(value))
            except ValueError:
                sys.stderr.write("mu-bridge: --poll takes seconds\n")
                return 2
    if harness == "pi" and role != "full-access":
        sys.stderr.write("mu-bridge: pi has no permissions or sandbox of its own: it runs full-access only\n")
        return 2
    if not program and harness == "acp":
        sys.stderr.write("mu-bridge: the acp harness runs the ACP agent you name: give --program or set %s\n"
                         % variable)
        return 2
    if harness == "pi" and ask:
        sys.stderr.write("mu-bridge: pi cannot ask for approval: --ask needs claude or codex\n")
        return 2
    if not folder:
        sys.stderr.write("mu-bridge: no folder: give --dir or set %s\n%s\n" % (DIR_VAR, USAGE))
        return 2
    try:
        command = shlex.split(program)
    except ValueError:
        command = []
    if not command:
        sys.stderr.write("mu-bridge: the %s program %r is not a command line\n" % (harness, program))
        return 2
    root = None
    if skill is not None:
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            root = place_skill(os.path.abspath(folder), skill)
        except OSError as exc:
            sys.stderr.write("mu-bridge: cannot write the mu skill in %s: %s\n" % (folder, exc.strerror or exc))
            return 1
    agent = HARNESSES[harness](command, extra, os.getcwd(), queue.Queue(), role, root, ask)
    bridge = Bridge(os.path.abspath(folder), os.getcwd(), agent, os.environ.get("MU_AGENT", ""), poll)

    def stop(signum, _frame):
        bridge.stopping = signum

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, stop)
    try:
        bridge.start()
        return bridge.run()
    except BridgeError as exc:
        sys.stderr.write("mu-bridge: %s\n" % exc)
        agent.stop()
        return 1
    except OSError as exc:
        agent.stop()
        if not os.path.isdir(bridge.inbox):
            return 0
        sys.stderr.write("mu-bridge: %s\n" % exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
