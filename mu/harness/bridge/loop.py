"""The bridge's loop: the turn files on one side (turnfiles.TurnFiles), a
harness on the other (harness.Harness, one subclass per module), and
`main`, mu-bridge's command line.

The Bridge takes each delivery once (turn.json first, then taken/, then
the inbox's file goes, then the harness is given the message: a crash
between two of these steps loses nothing and gives nothing twice), turns
the harness's events into turn records, and starts a harness that exits
again on its session.  What a caller may rely on is the package's
docstring (mu/harness/bridge/__init__.py).
"""

import os
import queue
import shlex
import signal
import sys
import threading
import time

from .acp import Acp, Gemini, OpenCode, Qwen
from .claude import Claude
from .codex import Codex
from .common import (
    CONTROL_KINDS,
    DIR_VAR,
    KINDS,
    OWN_KEY,
    POLL_S,
    RESTARTS,
    ROLES,
    START_TIMEOUT_S,
    BridgeError,
    brief,
    crash_point,
    decode_skill,
    first_line,
    message_uuid,
    now_ms,
    place_skill,
    say,
)
from .pi import Pi
from .turnfiles import TurnFiles
from .wake import watch

# The harnesses, by the name mu-bridge's first argument gives: a new harness
# is its module and its line here.
HARNESSES = {"claude": Claude, "codex": Codex, "pi": Pi, "acp": Acp, "qwen": Qwen, "gemini": Gemini,
             "opencode": OpenCode}
USAGE = ("usage: mu-bridge (%s) [--dir <folder>] [--program <command line>] [--role <role>]"
         " [--ask] [--poll <seconds>] [--skill <encoded SKILL.md>] [-- <extra args>]" % " | ".join(HARNESSES))


class Bridge:
    def __init__(self, folder, workdir, harness, agent_name="", poll_s=POLL_S):
        self.folder = folder
        self.workdir = workdir
        self.harness = harness
        self.agent_name = agent_name
        self.poll_s = poll_s
        self.events = harness.events
        self.files = TurnFiles(folder)
        self.inbox = self.files.inbox
        self.stopping = None
        self.record = None
        self.last_text = None  # the harness's result for the turn under way
        self.turn_error = None  # why the turn under way failed, as the harness said at its end
        self.request = None  # the pending permission request: (request_id, input)
        self.restarts = 0

    # -- start ---------------------------------------------------------------------

    def start(self):
        self.files.make()
        record = self.files.record()
        if record is None:
            record = {"state": "idle", "since": now_ms(), "runs": 0, "incarnation": 1, "lastText": None,
                      "settledAt": None, "turn": None, "session": None}
        self.record = record
        self.put_right()
        session = record.get("session")
        resume = bool(session) and record.get("harness") == self.harness.name and self.harness.resumable(session)
        if session and not resume:
            self.restart_elsewhere("its session %s could not be resumed" % session, session)
        record["harness"] = self.harness.name
        try:
            self.launch(session if resume else None, resume)
        except BridgeError as exc:
            if not resume:
                raise
            say("mu-bridge: %s; starting a new session" % exc)
            self.restart_elsewhere("its session %s could not be resumed" % session, session)
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

    def restart_elsewhere(self, why, session=None):
        """A new incarnation because the session is lost.  A turn under way
        whose message the lost `session` had (its harness's own files keep
        the receipt) settles with the loss, in the old incarnation, and is
        never given twice; one it never had is kept, as the new
        incarnation's first, and given again."""
        kept = self.record.get("turn")
        if kept is not None and kept["msgIds"] and session \
                and self.harness.delivered(session, message_uuid(kept["msgIds"][0]), kept):
            self.settle(kept, error="the bridge restarted during the turn, and its session was lost")
            kept = None
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
        # a delivery wakes the wait below at once; the poll still finds what the watch misses
        watch(self.inbox, lambda: self.events.put((None, ("wake",))))
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
            if self.files.is_taken(msg_id):
                self.files.unlink(name)
                return True
            kind = message.get("kind", "send")
            if self.record["turn"] is None or kind in CONTROL_KINDS:
                self.take(name, message, kind)
                return True
        return False

    def deliveries(self):
        return self.files.deliveries(KINDS, lambda line: say("mu-bridge: " + line))

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
        self.files.mark_taken(taken)
        self.files.unlink(name)
        crash_point("bridge-taken")
        if after is None:
            return
        if after[0] in ("user", "steer"):
            self.give(after[1], after[2], steer=after[0] == "steer")
            crash_point("bridge-given")
        elif after[0] == "answer":
            (request_id, tool_input), keys = after[1], after[2]
            say("  answered: %s" % self.harness.answer(request_id, tool_input, keys))
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
            say("  tool %s: %s" % (event[1], brief(event[2])))
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
        question, keys = self.harness.question(tool, tool_input)
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
        with the exit as its error when the harness had its message (it read
        the message's line off its pipe, or its receipt in its own files
        says so); when it never had it (it died with the line still in its
        pipe), the message is given again, so a harness's crash loses no
        message and none is given twice.  A harness whose receipt comes
        only with its resume (an ACP agent's session/load replays the
        history) is asked again once resumed."""
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
            self.restart_elsewhere("the session could not be resumed", session)
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
        """Whether the harness had the open turn's first message: it read
        the message's line off its pipe (asked of a harness that exited,
        before its next start), or its receipt says so."""
        turn = self.record.get("turn")
        if turn is None or not turn["msgIds"]:
            return False
        key = message_uuid(turn["msgIds"][0])
        return self.harness.took(key) or self.harness.delivered(session, key, turn)

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
        self.files.settled(record)
        say("= turn %d.%d settled%s: %s" % (record["incarnation"], record["runs"],
                                          " (%s)" % error if error else "", first_line(record["lastText"])))

    def save(self):
        self.files.save(self.record)

    def put_right(self):
        """After a crash between two writes: the taken records turn.json holds."""
        self.files.put_right(self.record)


def _keys(message):
    keys = message.get("keys")
    if isinstance(keys, list) and keys and all(isinstance(k, str) and k for k in keys):
        return keys
    return ["deny"]


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stderr.write(USAGE + "\n")
        return 0 if args else 2
    harness = args.pop(0)
    if harness not in HARNESSES:
        sys.stderr.write("mu-bridge: no harness %r (the harnesses: %s)\n%s\n" % (
            harness, ", ".join(sorted(HARNESSES)), USAGE))
        return 2
    kind = HARNESSES[harness]
    folder = os.environ.get(DIR_VAR) or None
    program = os.environ.get(kind.variable) or kind.default
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
    refused = kind.refused(role, ask)
    if refused:
        sys.stderr.write("mu-bridge: %s\n" % refused)
        return 2
    if not folder:
        sys.stderr.write("mu-bridge: no folder: give --dir or set %s\n%s\n" % (DIR_VAR, USAGE))
        return 2
    if not program and not kind.default:
        sys.stderr.write("mu-bridge: the %s harness runs the agent you name: give --program or set %s\n"
                         % (harness, kind.variable))
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
    agent = kind(command, extra, os.getcwd(), queue.Queue(), role, root, ask)
    bridge = Bridge(os.path.abspath(folder), os.getcwd(), agent, os.environ.get("MU_AGENT", ""), poll)

    def stop(signum, _frame):
        bridge.stopping = signum
        # the loop may be in a long wait (--poll): wake it, from a thread of
        # its own, as the queue's lock may be held by the code this interrupts
        threading.Thread(target=agent.events.put, args=((None, ("stop",)),), daemon=True).start()

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

