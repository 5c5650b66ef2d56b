"""What every module of the bridge shares: its constants, BridgeError, the
small helpers (the pane's lines, the harness's output read line by line,
the shapes of the events a harness's reader puts on its queue, lenient
readers of JSON values), and the mu skill's decoding and placement.

A harness module (one per harness: claude.py, codex.py, pi.py) imports
what it needs from here and from .harness; nothing here knows a harness.
Standard library only.
"""

import base64
import binascii
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
import zlib

DIR_VAR = "MU_DEMO_AGENT_DIR"  # the local provider names the job folder so (mu/plugins/local/processes.py)
SKILL_NAME = "mu"  # the skill's name in its front matter (mu/SKILL.md)
ROLES = ("full-access", "read-only")  # the JobSpec's roles (docs/harnesses.md, "Roles")
POLL_S = 0.05
START_TIMEOUT_S = 60.0  # the harness answers `initialize` within this, or the start failed
RESTARTS = 3  # restarts of a harness that keeps exiting, before the bridge gives up
CONTROL_KINDS = ("steer", "interrupt", "abort", "answer")
TURN_KINDS = ("send", "fresh", "command")
KINDS = CONTROL_KINDS + TURN_KINDS
ALLOW_KEYS = ("allow", "yes", "y")
DENY_KEYS = ("deny", "no", "n")
# The key of a turn the harness began itself (no message asked for it; see
# ("begin", why) in harness.py): it is never a message's key (those are uuid5s), and
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


def file_holds(path, text):
    try:
        with open(path, "rb") as f:
            return text.encode() in f.read()
    except OSError:
        return False


MAX_LINE = 64 << 20  # a longer line of a harness's output is skipped, never held whole
SKIP_PIECE = 64 << 10  # what is read at a time of a line being skipped


def read_lines(stream):
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


# What each event the readers put on `events` holds (harness.py's
# docstring): anything else is a translation of a malformed line, skipped.
SHAPES = {"ready": (str,), "failed": (str,), "text": (str,), "tool": (object, object),
           "ask": (object, str, object), "done": (str, (str, type(None)), (str, type(None))),
           "begin": (str,), "error": (str,)}


def as_dict(value):
    return value if isinstance(value, dict) else {}


def error_text(message, details=None):
    """One line of a harness's error: its message, and its details when they say more."""
    message = first_line(message) if isinstance(message, str) and message.strip() else "an error"
    if isinstance(details, str) and details.strip() and details.strip() not in message:
        return "%s: %s" % (message, first_line(details))
    return message


def as_text(value):
    return value if isinstance(value, str) else ""


def as_list(value):
    return value if isinstance(value, list) else []


def well_formed(event):
    shape = SHAPES.get(event[0]) if isinstance(event, tuple) and event else None
    if shape is None or len(event) != len(shape) + 1:
        return False
    if event[0] == "ask" and not isinstance(event[1], (str, int)):
        return False
    return all(isinstance(value, kind) for value, kind in zip(event[1:], shape))


def die_with_parent():
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


def brief(value, limit=200):
    if isinstance(value, dict) and isinstance(value.get("command"), str):
        return "run: " + first_line(value["command"], limit)
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = str(value)
    return first_line(text, limit)
