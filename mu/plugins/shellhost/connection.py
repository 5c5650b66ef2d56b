"""What the shared seams need of a connection, and of the plugin that mixes them in.

Written down as `typing.Protocol`s: the seams call nothing else, so a
provider whose host runs sh (over ssh, through a container engine's exec)
gets the link, the job and the channel by supplying these.
"""

from __future__ import annotations

from mu import sdk

# typing for the checker only: the plugin reaches its handshake without
# importing it (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ContextManager, Dict, List, Optional, Protocol, Sequence, Tuple
else:
    Protocol = object  # the interfaces below are documentation at run time


class Options(Protocol):
    work: str  # the work folder on the host: the link's login directory, jobs/ and bin/ under it

    def instance(self) -> str:
        """The plugin's instance: job tokens and the tmux socket are named from it."""
        ...


class Connection(Protocol):
    """One host, reached."""

    dest: str  # the host's name, in messages and in git's `<dest>:<path>`
    options: Options
    # optional: False makes the channel's watch poll its files (READ) rather
    # than wait on the host (WATCH); True when the attribute is missing
    watch_waits: bool

    def argv(self, program: str, args: Sequence[str]) -> List[str]:
        """The command line that runs sh `program` on the host, with the
        work folder as its first argument and then `args`."""
        ...

    def op(self, program: str, args: Sequence[str], end: float, cancel: Any = None, data: bytes = b"",
           acts: bool = False, hold: bool = False) -> List[str]:
        """Run a short sh program on the host (stdin: `data`) by `end`; its
        stdout's lines.  Raises the typed error when it cannot: `acts` says
        the program changes the host, so a failure after it may have run is
        `UnknownOutcome`, never `Retryable`.  `hold` keeps the program's
        stdin open until it ends (`runner.run`'s hold_stdin): the end of
        it on the host says the plugin gave up (a cancel, its end)."""
        ...

    def session(self, end: float, cancel: Any = None) -> ContextManager[None]:
        """Held around a long run (exec, git): one of the host's limited
        sessions, waited for until `end`."""
        ...

    def git_ssh_command(self) -> str:
        """git's GIT_SSH_COMMAND: runs the pack command git gives on the host."""
        ...

    def broken(self, code: Optional[int], text: str) -> Optional[sdk.PluginError]:
        """The typed error for a run whose end was not seen, when its
        command's status `code` and stderr `text` show the connection
        itself failed (nothing ran: a refused login, an unknown host key);
        None when the run may have run."""
        ...


class Connections(Protocol):
    def get(self, dest: str, end: float, cancel: Any = None) -> Connection:
        """The connection to host `dest`, made or reused, by `end`."""
        ...


class Host(Protocol):
    """What the plugin class that mixes the seams in supplies."""

    options: Options
    connections: Connections

    def _connection(self, call: Any, end: float) -> Connection:
        """The connection to the call's host (its target), by `end`."""
        ...

    def _job_connection(self, call: Any, seconds: float) -> Tuple[Connection, float]:
        """The connection for a job's call, and the end its budget allows
        (at most `seconds`: `job.call_end`)."""
        ...

    def view(self, conn: Connection, key: str) -> Dict[str, Any]:
        """A new view of job `key`: a command that attaches to its tmux
        session (`job.JobSeam.tmux_socket`, session `=<job.job_name(key)>`)."""
        ...
