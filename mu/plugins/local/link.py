"""The link seam: scripts, fetch and push on a host that is a folder.

link.exec runs the script with sh in <host>/<cwd> (an absolute cwd is read
inside the host, unless it already names a folder in it), link.fetch runs
`git fetch <host>/<remoteCwd> HEAD` in localRepo (so its FETCH_HEAD names
that HEAD), link.push makes <host>/<remoteRepo> a git repository if it is
not one and pushes rev to refs/mu/<rev> there (no branch moves, so a
non-bare repository with a checkout takes it), and succeeds untouched when
the repository already holds rev.  Each enforces timeoutMs itself and, on
a timeout, kills everything it started before it answers exitCode null
(mu.sdk.run_command): remoteOnTimeout "stopped", quiescence "provable".
link.checkSteps, phase reach: root, git, and host (when the call names
one).
"""

import os
import time

from mu import sdk
from mu.lazy import LazyPattern
from mu.plugins.local.fields import inside, timeout_of

MAX_SCRIPT_BYTES = 65536  # a script goes to `sh -c` as one argument: well under the kernel's 128 KiB
REV = LazyPattern(r"[0-9a-f]{40}([0-9a-f]{24})?\Z")


class LinkSeam:
    """The link seam's handlers; `Local` serves them."""

    @sdk.method("link.exec")
    def exec_(self, params, call):
        script = params.get("script")
        if not isinstance(script, str):
            raise sdk.Permanent("link.exec needs a script")
        if len(script.encode("utf-8", "surrogatepass")) > MAX_SCRIPT_BYTES:
            raise sdk.Permanent("the script is over %d bytes" % MAX_SCRIPT_BYTES)
        timeout_ms = timeout_of(params)
        where = inside(self._host_folder(call), params.get("cwd", "."))
        return sdk.run_command(script, where, timeout_ms, cancel=call).reply()

    @sdk.method("link.fetch")
    def fetch(self, params, call):
        timeout_ms = timeout_of(params)
        remote = inside(self._host_folder(call), params.get("remoteCwd", "."))
        local = _local_repo(params)
        argv = ["git", "fetch", "--no-tags", remote, "HEAD"]  # writes localRepo's FETCH_HEAD
        return sdk.run_command(argv, local, timeout_ms, cancel=call, env=_git_env()).reply()

    @sdk.method("link.push")
    def push(self, params, call):
        end = time.monotonic() + timeout_of(params) / 1000.0
        home = self._host_folder(call)
        remote = inside(home, params.get("remoteRepo"), must_exist=False)
        local = _local_repo(params)
        rev = params.get("rev")
        if not isinstance(rev, str) or not REV.match(rev):
            raise sdk.Permanent("rev must be a full commit id")
        # no discovery above the remote: a folder inside some other
        # repository is not that repository
        env = _git_env(GIT_CEILING_DIRECTORIES=os.path.dirname(remote))
        runs = _Runs(end, call, env)
        if os.path.isdir(remote) and runs.quiet(["git", "rev-parse", "--git-dir"], remote) == 0:
            if runs.quiet(["git", "cat-file", "-e", rev + "^{commit}"], remote) == 0:
                return _ok()  # protocol "The link": already holds it, untouched
        else:
            try:
                os.makedirs(remote, mode=0o700, exist_ok=True)
            except OSError as exc:
                raise sdk.Permanent("cannot make %s: %s" % (remote, exc.strerror or exc)) from None
            if not runs.step(["git", "init", "-q", remote], home):
                return runs.reply()
        # a ref of its own: no branch moves, so a checked-out branch of a
        # non-bare repository is no obstacle and its work tree stays as it is
        runs.step(["git", "push", "-q", "--no-verify", remote, "%s:refs/mu/%s" % (rev, rev)], local, _git_env())
        return runs.reply()

    @sdk.method("link.checkSteps")
    def check_steps(self, params, call):
        host = self._host_target(call)
        if params.get("phase") != "reach":
            return []
        steps = [self._root_step(), _git_step(call)]
        if host.get("handle") is not None:
            steps.append(self._host_step(host))
        return steps

    def _root_step(self):
        if os.path.isdir(self.root):
            if os.access(self.root, os.W_OK | os.X_OK):
                return {"step": "root", "ok": True, "detail": "%s exists and is writable" % self.root}
            return {"step": "root", "ok": False, "detail": "cannot write in %s" % self.root}
        parent = self.root  # the nearest thing that exists on the way up
        while not os.path.lexists(parent) and os.path.dirname(parent) != parent:
            parent = os.path.dirname(parent)
        if parent != self.root and os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK):
            return {"step": "root", "ok": "warn", "detail": "%s does not exist yet; the first acquire makes it" % self.root}
        return {"step": "root", "ok": False, "detail": "%s cannot be made (create it, or pass --root)" % self.root}

    def _host_step(self, host):
        try:
            folder = self._host_folder_of(host)
        except sdk.Permanent as exc:
            return {"step": "host", "ok": False, "detail": exc.message}
        return {"step": "host", "ok": True, "detail": "%s exists" % folder}


def _local_repo(params):
    local = params.get("localRepo")
    if not isinstance(local, str) or not os.path.isabs(local) or not os.path.isdir(local):
        raise sdk.Permanent("localRepo is not an absolute folder: %s" % (local,))
    return local


def _git_env(**extra):
    env = dict(os.environ)
    env["GIT_TERMINAL_PROMPT"] = "0"  # nothing here may wait for a person
    env.update(extra)
    return env


def _ok():
    return {"exitCode": 0, "stdout": "", "stderr": "", "partial": False}


class _Runs:
    """Several commands against one deadline, answered as one link.exec
    result: the output of the steps that print, the exit code of the last
    one run, exitCode null once the time is up."""

    def __init__(self, end, call, env):
        self.end = end
        self.call = call
        self.env = env
        self.out = []
        self.err = []
        self.partial = False
        self.code = 0

    def _left_ms(self):
        return int((self.end - time.monotonic()) * 1000)

    def quiet(self, argv, cwd):
        """Run a probe whose output is not part of the answer; its exit
        code, or None when the time is up (the answer is then a timeout)."""
        left = self._left_ms()
        if left < 1:
            self.code = None
            return None
        run = sdk.run_command(argv, cwd, left, cancel=self.call, env=self.env)
        if run.exit_code is None:
            self.code = None
        return run.exit_code

    def step(self, argv, cwd, env=None):
        """Run a step of the answer; True if it succeeded in time."""
        if self.code is None:
            return False
        left = self._left_ms()
        if left < 1:
            self.code = None
            return False
        run = sdk.run_command(argv, cwd, left, cancel=self.call, env=self.env if env is None else env)
        self.out.append(run.stdout)
        self.err.append(run.stderr)
        self.partial = self.partial or run.partial
        self.code = run.exit_code
        return run.exit_code == 0

    def reply(self):
        return {"exitCode": self.code, "stdout": "".join(self.out), "stderr": "".join(self.err), "partial": self.partial}


def _git_step(call):
    try:
        run = sdk.run_command(["git", "--version"], None, 5000, cancel=call)
    except sdk.Permanent:
        return {"step": "git", "ok": False, "detail": "git is not on PATH"}
    if run.exit_code != 0:
        return {"step": "git", "ok": False, "detail": "git --version failed"}
    return {"step": "git", "ok": True, "detail": run.stdout.strip()}
