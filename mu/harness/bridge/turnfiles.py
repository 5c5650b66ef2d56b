"""The turn files of a job's folder, kept as docs/local-provider.md ("Turn
files") says: inbox/<name>.json (deliveries, written by whoever delivers),
taken/<id>.json (one per msgId taken: a msgId is taken once), turn.json
(the turn record) and turns/<inc>-<n>.json (each settled turn, as an
observation).

Every record is replaced whole (a temporary file beside it, fsync,
rename), so a reader sees the old record or the new one, never half of
one; a record that must be written once is linked into place, so two
writers never both write it.  What a caller may rely on: a settled turn's
observation is written before turn.json counts it (settled()), and
put_right() writes the taken records and the observation that turn.json
holds after a crash between two writes, so nothing is lost and nothing is
taken twice.  Standard library only: it imports nothing of the bridge's.
"""

import hashlib
import json
import os
import re
import tempfile

PLAIN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}\Z")


def read_json(path):
    """The JSON object at `path`, or None when there is none or it is not one."""
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
    """Replace the record at `path` whole."""
    os.replace(_temp(path, value), path)


def create_json(path, value):
    """Write the record at `path` only if there is none (a hard link fails
    when the name exists); True if this call wrote it."""
    temp = _temp(path, value)
    try:
        os.link(temp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(temp)


def taken_name(msg_id):
    """taken/<this>.json: the msgId itself when it is a plain file name,
    else "sha256-" and its digest."""
    if PLAIN_ID.match(msg_id):
        return msg_id
    return "sha256-" + hashlib.sha256(msg_id.encode("utf-8", "surrogatepass")).hexdigest()


def observation(record):
    """What turns/<inc>-<n>.json holds of a settled turn record."""
    seen = {"status": "idle", "settled": True, "since": record["settledAt"], "runs": record["runs"],
            "incarnation": record["incarnation"], "lastText": record["lastText"] or ""}
    if record.get("lastError"):
        seen["lastError"] = record["lastError"]
    return seen


class TurnFiles:
    """The files of one job's folder: its paths, and the writes in the order
    the rules above need."""

    def __init__(self, folder):
        self.folder = folder
        self.inbox = os.path.join(folder, "inbox")
        self.taken = os.path.join(folder, "taken")
        self.turns = os.path.join(folder, "turns")
        self.turn_path = os.path.join(folder, "turn.json")

    def make(self):
        """The folders, and none of the temporary files a writer killed
        mid-write left in the ones only the agent writes (the job folder,
        taken/, turns/; inbox/ is the deliverers', who may be writing now)."""
        for path in (self.folder, self.inbox, self.taken, self.turns):
            os.makedirs(path, mode=0o700, exist_ok=True)
        for path in (self.folder, self.taken, self.turns):
            for name in os.listdir(path):
                if name.startswith(".tmp-"):
                    try:
                        os.unlink(os.path.join(path, name))
                    except OSError:
                        pass  # gone already, or not ours to remove: readers skip dot names anyway

    def record(self):
        """turn.json, or None when there is none yet."""
        return read_json(self.turn_path)

    def save(self, record):
        write_json(self.turn_path, record)

    def deliveries(self, kinds, said):
        """The inbox's deliveries, oldest first (by their `at`, then their
        name), as (name, message).  One that is not a delivery (no msgId, a
        kind not in `kinds`) is set aside as .bad-<name>, with a line to `said`."""
        try:
            names = [n for n in os.listdir(self.inbox) if n.endswith(".json") and not n.startswith(".")]
        except OSError:
            return []
        found = []
        for name in names:
            message = read_json(os.path.join(self.inbox, name))
            kind = (message or {}).get("kind", "send")
            if not message or not isinstance(message.get("msgId"), str) or not message["msgId"] or kind not in kinds:
                said("inbox/%s is not a delivery; set aside" % name)
                try:
                    os.replace(os.path.join(self.inbox, name), os.path.join(self.inbox, ".bad-" + name))
                except OSError:
                    pass
                continue
            at = message.get("at")
            found.append(((at if isinstance(at, int) and not isinstance(at, bool) else 0, name), name, message))
        return [(name, message) for _key, name, message in sorted(found, key=lambda f: f[0])]

    def is_taken(self, msg_id):
        return os.path.exists(os.path.join(self.taken, taken_name(msg_id) + ".json"))

    def mark_taken(self, taken):
        """taken/<id>.json for a take turn.json holds already (written once)."""
        create_json(os.path.join(self.taken, taken_name(taken["msgId"]) + ".json"), taken)

    def unlink(self, name):
        try:
            os.unlink(os.path.join(self.inbox, name))
        except OSError:
            pass

    def settled(self, record):
        """Write the observation of the turn `record` counts last, then the record."""
        write_json(self._observed(record), observation(record))
        self.save(record)

    def put_right(self, record):
        """After a crash between two writes: the taken records turn.json
        holds, and the observation of the turn it counts last."""
        for taken in record.get("takenLog") or []:
            self.mark_taken(taken)
        if record["runs"] > 0 and record.get("settledAt") is not None:
            path = self._observed(record)
            if not os.path.exists(path):
                write_json(path, observation(record))

    def _observed(self, record):
        return os.path.join(self.turns, "%d-%d.json" % (record["incarnation"], record["runs"]))
