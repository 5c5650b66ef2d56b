"""Where things live under the root, and the names of hosts, jobs and tokens.

Under the root (--root, else ${XDG_STATE_HOME:-~/.local/state}/mu-plugin-local):

    keys/hosts/, keys/jobs/   what became of each effect key (mu.sdk's
                              LookupStore), kept for as long as the root
    handles/<handle>.json     each host's key, folder and params digest,
                              and whether it was released
    hosts/<handle>/           a host: its login directory (link.exec's ".")
    hosts/<handle>/jobs/<k>/  a job of that host (k: its key, or a digest
                              of a key that is not a plain file name);
                              "<handle>/jobs/<k>" is the job's file handle

A job folder holds job.json (the spec as started), pid.json (the wrapper's
claim), exit.json (its exit status), stopped.json (a stop mark) and, for a
detached job, output.log; the demo agent's turn files (turns.py) and the
channel's own records (channel.py) sit beside them.  These names are
stable: the plugin reads folders an earlier process wrote.
"""

import os

from mu.digest import sha256_hex
from mu.plain import is_plain

_HEX = frozenset("0123456789abcdef")
# the job folder's files
JOB_FILE, PID_FILE, EXIT_FILE, STOP_FILE = "job.json", "pid.json", "exit.json", "stopped.json"
LOG_FILE = "output.log"  # a detached job's stdout and stderr
# the spec's env values (mode 0600), apart from job.json: the job's wrapper
# reads them and removes the file before the command starts; a stop removes it
ENV_FILE = "env.json"


def is_handle(text: str) -> bool:
    """Whether `text` is a host's handle as `host_handle` makes them:
    "h-" and 12 lower-case hex digits."""
    return len(text) == 14 and text.startswith("h-") and _HEX.issuperset(text[2:])


def host_handle(key: str) -> str:
    """The handle of the host acquired with `key`."""
    return "h-" + sha(key)[:12]


def job_name(key: str) -> str:
    """The job folder's name for `key`: the key itself when it is a plain
    file name, else a digest of it."""
    if is_plain(key, 100):
        return key
    return "k-" + sha(key)[:16]


def job_handle(host: str, key: str) -> str:
    """The file handle of job `key` on host `host`: its folder, relative to
    the hosts folder."""
    return "%s/jobs/%s" % (host, job_name(key))


def job_token(root: str, key: str) -> str:
    """The value of the SDK's run token in every process of the job: of the
    key under this root, so that a job of another root (another registration,
    another test) with the same key is never taken for it, and a stop finds
    the job's processes by it even once the host's folder is gone."""
    return "local-job-" + sha(os.path.realpath(root) + "\0" + key)[:24]


def default_root() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "mu-plugin-local")


def default_instance(root: str) -> str:
    return "local-" + sha(os.path.abspath(root))[:12]


def sha(text: str) -> str:
    return sha256_hex(text)
