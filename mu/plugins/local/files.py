"""The plugin's records on disk: JSON files, each replaced whole.

What a caller may rely on: a reader sees the old record or the new one,
never a part (`write_json`: a temporary file, fsync, rename), but for a
record of secrets, written in place so that no copy of it is left beside
it (`write_private`); a record that
may exist only once (pid.json, exit.json, stopped.json, a fence) is made
with a hard link, which fails if the name exists, so the first writer wins
(`create_json`); a record that cannot be read is damage and reads as {}.
Folders are made mode 0700.
"""

import os
import time

from mu import filebytes, jsontext


def ensure_dir(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)


def read_json(path: str) -> "dict | None":
    """The JSON record at `path`; None when there is none, {} when it
    cannot be read (records are replaced whole, so that is damage)."""
    try:
        value = jsontext.loads(filebytes.read(path).decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


# path -> (what the file was when read, its record)
_kept: "dict[str, tuple]" = {}


def read_kept(path: str) -> "dict | None":
    """`read_json(path)`, read again only when the file changed since this
    process last read it.  For the records every call reads and nothing
    rewrites in place: a host's record and a job's job.json, replaced only
    whole (a rename puts a new file, a new inode, at the path) or never
    after they are made.  The file is taken as unchanged while its device,
    inode, size and both change times are; it is looked at (a stat) before
    it is read, so a record replaced meanwhile is read again next time.
    Each caller gets its own copy of the record's top level."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        _kept.pop(path, None)
        return None
    except OSError:
        return {}
    mark = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    kept = _kept.get(path)
    if kept is None or kept[0] != mark:
        record = read_json(path)
        if record is None:
            return None  # gone between the stat and the read
        kept = _kept[path] = (mark, record)
    return dict(kept[1])




def _temp_json(path, value):
    import tempfile  # here: only writers need it, and it is slow to import

    fd, temp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(jsontext.dumps(value, separators=(",", ":"), sort_keys=True).encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
    return temp


def write_json(path: str, value: dict) -> None:
    """Replace the record at `path` whole: a reader sees the old or the new."""
    os.replace(_temp_json(path, value), path)


def write_private(path: str, value: dict) -> None:
    """Write the record at `path` in place, mode 0600, with no temporary
    file: a process killed in the middle leaves a part of it at `path`, never
    a stray copy beside it.  For a record that holds secrets and that nobody
    reads before a record written after it points to it (a job's env.json,
    written before its job.json)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(jsontext.dumps(value, separators=(",", ":"), sort_keys=True).encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())


def create_json(path: str, value: dict) -> bool:
    """Write the record at `path` only if there is none; True if this call
    wrote it (a hard link fails when the name exists: first one wins)."""
    temp = _temp_json(path, value)
    try:
        os.link(temp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(temp)


def listdir(path: str) -> "list[str]":
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def remove_tree(path: str) -> None:
    import shutil

    def writable(function, name, _info):
        # a read-only folder inside (a module cache, say) must not keep the
        # host alive: make it writable and try once more
        os.chmod(os.path.dirname(name), 0o700)
        if function in (os.rmdir, os.unlink, os.remove):
            function(name)
        else:  # it could not be listed
            os.chmod(name, 0o700)
            shutil.rmtree(name, onerror=writable)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=writable)


def now_ms() -> int:
    return int(time.time() * 1000)
