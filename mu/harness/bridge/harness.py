"""The base of every harness: a child process in its structured mode, read
by a thread that turns its output into the bridge's own events.

A harness is one module with one subclass of Harness (claude.py, codex.py,
pi.py), named in loop.HARNESSES.  It sets `name`, `variable` (the
environment variable naming its program) and `default` (the program on
PATH otherwise), and implements:

- start(session, resume): spawn() the program (resuming `session` when
  `resume`, else a new session; `session` may be None) and, once it can
  take a message, put ("ready", session id) on `events`;
- translate(message): the bridge's events (below) for one JSON object the
  harness printed (a list; an exception or a malformed event skips the
  line, never the reader);
- user(key, text, steer): give it a message whose key is `key`;
- interrupt(): stop the turn under way;
- permit(request_id, allow, tool_input, reply, keys): answer its "ask";
- resumable(session): whether `session` can be resumed;
- delivered(session, key, turn): whether the harness had the message
  `key` (the receipt after a crash);

and calls gave(key, <what write() answered>) where it writes a message's
prompt: the loop asks took(key) of a harness that exited before it asks
delivered(), whose files may show the message late;

and may override mark(session) (what the bridge keeps with a turn for that
receipt), question(tool, input) and answer(request_id, input, keys) (how
an "ask" is shown as `blocked` and how `mu answer`'s keys answer it),
start_failed() (why a start failed, in one line) and refused(role, ask) (a
role or --ask the harness cannot honour).  Its events go on
`events` as (process, event) pairs:

  ("ready", session)            it can take a message; session: its id
  ("failed", why)               its start (or resume) failed
  ("text", text)                the agent said something
  ("tool", name, input)         the agent runs a tool
  ("ask", request, tool, input) it asks a permission (or a question)
  ("done", key, text, error)    the message `key` is done with; text: the turn's result;
                                error: why it failed (the harness gave up), or None
  ("begin", why)                the harness began a turn no message asked for (a
                                background task it reports, an extension's prompt):
                                its key is OWN_KEY, and its end is ("done", OWN_KEY, ...)
  ("error", text)               the harness reports trouble it may still get past (a
                                retry of the model, a refused connection): for the pane
                                and the turn's lastError, the turn stays open
  ("exit", code)                the process ended
"""

import array
import fcntl
import json
import os
import subprocess
import termios
import threading

from .common import (
    ALLOW_KEYS,
    DENY_KEYS,
    DIR_VAR,
    MAX_LINE,
    BridgeError,
    as_list,
    brief,
    die_with_parent,
    first_line,
    read_lines,
    say,
    well_formed,
)

DRAIN_S = 2.0  # after the harness exits, how long its report waits for the end of its output


class Harness:
    name = ""
    variable = ""  # the environment variable that names its program
    default = ""  # its program otherwise

    @classmethod
    def refused(cls, role, ask):
        """Why this harness cannot run with `role` (and --ask when `ask`), or None."""
        return None

    def __init__(self, program, extra, cwd, events, role="full-access", skill=None, ask=False):
        self.role = role
        self.ask = ask  # --ask: the harness's own asking mode, in place of never asking
        self.skill = skill  # the mu skill's tree (place_skill), or None
        self.program = program
        self.extra = extra
        self.cwd = cwd
        self.events = events
        self.proc = None
        self.written = 0  # the bytes written to this start's stdin
        self.given = {}  # a message's key -> where its prompt's line ends in this start's stdin (gave())
        self.stderr_tail = []
        self.stderr_reader = None  # the thread reading its stderr (a failed start waits for its last lines)
        self.lock = threading.Lock()
        self.log_lock = threading.Lock()  # harness.log: its stderr and the lines skipped

    def spawn(self, argv, env=None):
        """Start the harness (`env`: its whole environment, None for the
        bridge's own) and the threads that read it."""
        try:
            self.proc = subprocess.Popen(argv, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, preexec_fn=die_with_parent, env=env)
        except OSError as exc:
            raise BridgeError("cannot start %s: %s" % (" ".join(self.program), exc.strerror or exc)) from None
        proc = self.proc
        self.written, self.given = 0, {}
        reader = threading.Thread(target=self._read, args=(proc,), daemon=True)
        reader.start()
        threading.Thread(target=self._reap, args=(proc, reader), daemon=True).start()
        self.stderr_reader = threading.Thread(target=self._errors, args=(proc,), daemon=True)
        self.stderr_reader.start()

    def _read(self, proc):
        """Its stdout, one JSON event a line, until it ends.  Whatever bytes
        the harness prints, this thread neither dies nor stops reading: a
        line that is not a JSON object, or that translate() cannot read, is
        logged (harness.log and the pane) and skipped (docs/harnesses.md,
        "What the bridge writes")."""
        try:
            for raw in read_lines(proc.stdout):
                self._take(proc, raw)
        except Exception as exc:  # noqa: BLE001 (a read that fails ends the reading, never the exit's report)
            self.skipped("its output could not be read: %s" % (exc,))

    def _reap(self, proc, reader):
        """Put the harness's exit on `events` once the process is gone.  Its
        last lines come first when its output ends within DRAIN_S of the
        exit; a process it left behind that still holds the pipe (a child
        that outlived it) delays the report by no more than that, so a turn
        never waits on an end of output that may never come."""
        proc.wait()
        reader.join(DRAIN_S)
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
            if well_formed(event):
                self.events.put((proc, event))
            else:
                self.skipped("an event of a shape the bridge cannot read (%s)" % brief(list(event), 80), raw)

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
            for raw in read_lines(proc.stderr):
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
        """Write one JSON line to the harness's stdin: where the line ends
        in this start's stdin (for gave()), or None when it did not all
        reach the pipe (the harness exited: its end comes as an event)."""
        line = json.dumps(value).encode("utf-8") + b"\n"
        with self.lock:
            try:
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
            except (OSError, ValueError, AttributeError):
                return None
            self.written += len(line)
            return self.written

    def gave(self, key, end):
        """Note that the line ending at `end` of this start's stdin (what
        write() answered; None: it never reached the pipe) gives the
        message `key`, for took()."""
        if end is not None:
            self.given[key] = end

    def took(self, key):
        """Whether this start of the harness read the line that gives the
        message `key` off its stdin (see gave()): the bytes written less
        those still in the pipe reach the line's end.  The pipe keeps its
        unread bytes after the harness exited, for as long as the bridge
        holds its writing end, so this is asked once it exited, before it
        is started again: a receipt that does not wait for the harness's
        own files.  A harness that writes its history late (pi writes
        nothing of a new session until the first answer; Qwen Code queues
        its writes) can have sent the message on to its model before any
        file shows it.  Read but not yet acted on counts as had: a message
        given twice may do its work twice.  False when it cannot be known."""
        if key not in self.given:
            return False
        unread = array.array("i", [0])
        try:
            fcntl.ioctl(self.proc.stdin.fileno(), termios.FIONREAD, unread)  # a pipe's either end answers it
        except (OSError, ValueError, AttributeError):
            return False
        return self.written - unread[0] >= self.given[key]

    def question(self, tool, tool_input):
        """(the pending question of an "ask", the keys its `mu answer` takes,
        as shown): a question of the agent's (AskUserQuestion, pi's
        `question`) offers its first question's options; a permission,
        allow | deny."""
        questions = tool_input.get("questions") if isinstance(tool_input, dict) else None
        if tool in ("AskUserQuestion", "question") and isinstance(questions, list):
            asked = [q for q in questions if isinstance(q, dict)]
            question = "%s asks: %s" % (self.name, " / ".join(first_line(q.get("question"), 150) for q in asked))
            labels = [o.get("label") for q in asked[:1] for o in as_list(q.get("options"))
                      if isinstance(o, dict) and isinstance(o.get("label"), str)]
            return question, " | ".join(labels) if labels else "<your answer>"
        if tool in ("AskUserQuestion", "question"):
            return "%s asks: %s" % (self.name, brief(tool_input, 300)), "<your answer>"
        return "%s wants to %s" % (tool, brief(tool_input, 300)), "allow | deny"

    def answer(self, request_id, tool_input, keys):
        """Answer the "ask" `request_id` with the keys of an `answer`
        delivery (permit()), and say how, for the pane: allow/yes/y allows
        a permission, deny/no/n denies it, other keys deny it with the keys
        as the user's reply; a question's keys are its answer."""
        allow = keys[0].lower() in ALLOW_KEYS
        reply = None if allow or keys[0].lower() in DENY_KEYS else "The user answered: %s" % " ".join(keys)
        question = isinstance(tool_input, dict) and isinstance(tool_input.get("questions"), list)
        self.permit(request_id, allow, tool_input, reply, keys if question else ())
        return " ".join(keys) if question else "allow" if allow else reply or "deny"

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
