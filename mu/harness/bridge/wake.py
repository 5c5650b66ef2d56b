"""A wake-up when a delivery lands in the inbox, so the bridge takes a
message the moment it is renamed into place instead of at its next poll.

On Linux the inbox is watched with inotify (through ctypes: the bridge
runs on hosts where only the standard library is), for a file renamed
into it or written and closed there, as a deliverer's temporary file and
rename make it.  A thread reads the watch and calls `wake()` once per
batch of events.  Where there is no inotify (another system, a Python
without ctypes, no watch left under the user's limit) nothing is
watched and the poll alone finds deliveries, as it always does: the
watch only shortens the wait, and a delivery it missed is still found.
"""

import os
import threading

IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080


def watch(folder, wake):
    """Call `wake()` from a daemon thread whenever a file arrives in
    `folder`; True when the watch is set, False when only polling can find
    what arrives."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_CLOEXEC)
    except (ImportError, OSError, AttributeError):
        return False
    if fd < 0:
        return False
    if libc.inotify_add_watch(fd, os.fsencode(folder), IN_CLOSE_WRITE | IN_MOVED_TO) < 0:
        os.close(fd)
        return False

    def read():
        while True:
            try:
                if not os.read(fd, 4096):
                    return
            except InterruptedError:
                continue
            except OSError:
                return  # the inbox went away: the loop says so and ends
            wake()

    threading.Thread(target=read, name="mu-bridge-inbox", daemon=True).start()
    return True
