"""The least a `mu host exec <host> -- true` can be: bench 17's yardstick.

    least_exec.py <mu.db> <host>

Does what the verb must and nothing else: one read of the host's plugin
argv and handle through `_sqlite3` (no `sqlite3` package, no migrations,
no records), the plugin's spawn, `initialize`, `link.exec` of `true`,
`shutdown`, stdin closed, the plugin reaped.  No trust checks, no intent,
no journal, no schema, no group, no signals: not a way to run anything,
only a floor for what mu's verb adds to the plugin's own start and call.
Exits 0 once the plugin answered exit code 0, 1 on anything else.
"""

import _sqlite3
import os
import sys

EXEC = ('{"jsonrpc":"2.0","id":2,"method":"link.exec","params":{"script":"true","cwd":".",'
        '"target":{"host":{"name":"%s","handle":"%s"}},"timeoutMs":20000}}\n')


def main() -> int:
    db, host = sys.argv[1], sys.argv[2]
    conn = _sqlite3.connect(db)
    try:
        words = [w for (w,) in conn.execute(
            "SELECT w.value FROM hosts h JOIN plugins p ON p.name = h.plugin, json_each(p.argv) w"
            " WHERE h.name = ? ORDER BY w.key", (host,))]
        handle = conn.execute("SELECT handle FROM hosts WHERE name = ?", (host,)).fetchone()[0]
    finally:
        conn.close()
    if not words or not all(c.isalnum() or c in "-_." for c in host + handle):
        return 1
    theirs_in, ours_out = os.pipe()
    ours_in, theirs_out = os.pipe()
    pid = os.posix_spawn(words[0], words, dict(os.environ),
                         file_actions=[(os.POSIX_SPAWN_DUP2, theirs_in, 0), (os.POSIX_SPAWN_DUP2, theirs_out, 1)])
    os.close(theirs_in)
    os.close(theirs_out)
    pending = [b""]

    def ask(line: str) -> bytes:
        os.write(ours_out, line.encode())
        while b"\n" not in pending[0]:
            chunk = os.read(ours_in, 65536)
            if not chunk:
                return b""
            pending[0] += chunk
        answer, _, pending[0] = pending[0].partition(b"\n")
        return answer

    ask('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol":{"min":1,"max":1},"mu":"0.1.0"}}\n')
    ran = ask(EXEC % (host, handle))
    ask('{"jsonrpc":"2.0","id":3,"method":"shutdown","params":{}}\n')
    os.close(ours_out)
    os.waitpid(pid, 0)
    return 0 if b'"exitCode":0' in ran else 1


if __name__ == "__main__":
    sys.exit(main())
