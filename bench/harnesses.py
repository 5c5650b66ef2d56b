"""Bench 14: real coding agents behind mu-bridge, against the same agent driven bare.

For each harness installed by tests/harnesses/install.sh (Claude Code,
Codex, pi, and Qwen Code, Gemini CLI and OpenCode as the ACP agents), against the tests' stub model on 127.0.0.1
(tests/harnesses/stub_model.py, which answers at once):

- a turn's end: from the stub's last byte of the turn's answer to `mu wait
  <agent> --after N --json` printing the event, `mu wait` started before
  the delivery and the delivery made only once its plugin's watch is open
  (bench 11's readiness, bench/wait.py), so mu's start-up is outside the
  span; the message is written straight into the job's inbox (the turn
  files' rule: whoever delivers writes the file).  The floor: the same
  harness driven bare by this script (its structured mode on a pipe, no
  bridge, no mu), from the stub's last byte to reading the harness's own
  end of turn (Claude's `result`, Codex's `turn/completed`, pi's
  `agent_end`, the answer to an ACP agent's `session/prompt`: a bare ACP
  client).  Target: within 1.2x; for an ACP agent, whose turn is one shell tool
  call (`STUB_TOOL`), within 1.3x (issue 27).  The notes split mu's span at the bridge's settle
  (turn.json's ctime).
- spawn to ready: `mu agent spawn <agent> --host box --harness <h>` from
  its start to the agent's turn record (the bridge writes turn.json only
  once the harness can take a message), against the bare harness's own
  start-up: from its start to its answer to the first request (Claude's
  `initialize`, Codex's `thread/start`, pi's `get_state`).  No target (informational).

A harness that is not installed is reported as such (the bench exits 0).
MU_BENCH_HARNESSES (say `claude`) measures only the harnesses it names.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Callable, Dict, List, Optional, Tuple

import harness
from harness import ROOT, Row, mu

sys.path.insert(0, os.path.join(ROOT, "tests"))

LOCAL = os.path.join(ROOT, "examples", "mu-plugin-local")
TIMEOUT_S = 60.0
TARGET = 1.2
ACP_TARGET = 1.3  # issue 27: the ACP bridge's turn with one tool call
PI_FLAGS = ("--provider", "stub", "--model", "stub-model")
ACP = ("qwen", "gemini", "opencode")  # the agents behind the ACP bridge
TOOL = {name: "STUB_TOOL " for name in ACP}  # an ACP agent's turn is one shell tool call


def installed(name: str) -> Optional[str]:
    """The pinned harness's program where tests/harnesses/install.sh put
    it (the tests' own lookup), or None."""
    from harness_fixture import cache_folder

    for folder in (cache_folder(), cache_folder() / "acp"):
        program = folder / "node_modules" / ".bin" / name
        if os.access(program, os.X_OK):
            return str(program)
    return None


def environment(name: str, program: str, stub, folder: str) -> Dict[str, str]:
    """What the harness runs in, bare or under mu: a private HOME, the stub as its model."""
    home = os.path.join(folder, "home")
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ, HOME=home, MU_PANES="headless",
               PATH=os.path.join(ROOT, "bin") + os.pathsep + harness.venv_first_path(),
               GIT_AUTHOR_NAME="Bench", GIT_AUTHOR_EMAIL="bench@example.org", GIT_COMMITTER_NAME="Bench",
               GIT_COMMITTER_EMAIL="bench@example.org", GIT_CONFIG_NOSYSTEM="1",
               GIT_CONFIG_GLOBAL=os.path.join(folder, "gitconfig"))
    if name == "claude":
        # IS_SANDBOX: the full-access role is bypassPermissions, which Claude refuses to root elsewhere
        env.update(MU_HARNESS_CLAUDE=program, ANTHROPIC_BASE_URL=stub.url, ANTHROPIC_API_KEY="sk-stub", IS_SANDBOX="1",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1")
        env.pop("ANTHROPIC_AUTH_TOKEN", None)
    elif name == "pi":
        agent_dir = os.path.join(folder, "pi-agent")
        os.makedirs(agent_dir, exist_ok=True)
        with open(os.path.join(agent_dir, "models.json"), "w") as f:
            json.dump({"providers": {"stub": {"baseUrl": stub.url + "/v1", "api": "openai-completions",
                                              "apiKey": "sk-stub", "models": [{"id": "stub-model"}]}}}, f)
        env.update(MU_HARNESS_PI=f"{program} {' '.join(PI_FLAGS)}", PI_CODING_AGENT_DIR=agent_dir, PI_OFFLINE="1")
    elif name == "qwen":
        env.update(MU_HARNESS_QWEN=program, OPENAI_BASE_URL=stub.url + "/v1", OPENAI_API_KEY="sk-stub",
                   OPENAI_MODEL="stub-model")
    elif name == "opencode":
        config = {"model": "stub/stub-model", "autoupdate": False, "share": "disabled",
                  "provider": {"stub": {"npm": "@ai-sdk/openai-compatible", "name": "stub",
                                        "options": {"baseURL": stub.url + "/v1", "apiKey": "sk-stub"},
                                        "models": {"stub-model": {"name": "stub-model"}}}}}
        # nothing fetched past the stub (tests/harness_fixture.py)
        env.update(MU_HARNESS_OPENCODE=program, OPENCODE_CONFIG_CONTENT=json.dumps(config),
                   OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_AUTOUPDATE="1",
                   OPENCODE_DISABLE_LSP_DOWNLOAD="1", OPENCODE_DISABLE_SHARE="1", npm_config_offline="true")
    elif name == "gemini":
        # usage statistics off: on, it looks up Google's servers (tests/harness_fixture.py)
        os.makedirs(os.path.join(home, ".gemini"), exist_ok=True)
        with open(os.path.join(home, ".gemini", "settings.json"), "w") as f:
            json.dump({"privacy": {"usageStatisticsEnabled": False}}, f)
        env.update(MU_HARNESS_GEMINI=program, GEMINI_API_KEY="stub-key", GOOGLE_GEMINI_BASE_URL=stub.url,
                   GEMINI_CLI_TRUST_WORKSPACE="true")
    else:
        codex_home = os.path.join(folder, "codex-home")
        os.makedirs(codex_home, exist_ok=True)
        with open(os.path.join(codex_home, "config.toml"), "w") as f:
            f.write('model = "stub-model"\nmodel_provider = "stub"\n\n[model_providers.stub]\nname = "stub"\n'
                    f'base_url = "{stub.url}/v1"\nenv_key = "STUB_MODEL_KEY"\nwire_api = "responses"\n'
                    "request_max_retries = 0\nstream_max_retries = 0\n")
        env.update(MU_HARNESS_CODEX=program, CODEX_HOME=codex_home, STUB_MODEL_KEY="sk-stub")
    return env


# -- the floor: the harness driven bare ------------------------------------------------


class Bare:
    """The harness in its structured mode on a pipe, driven by this process."""

    def __init__(self, name: str, program: str, env: Dict[str, str], cwd: str) -> None:
        self.name, self.n = name, 0
        started = time.time()
        if name == "claude":
            argv = [program, "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
                    "--permission-prompt-tool", "stdio", "--session-id", str(uuid.uuid4())]
        elif name == "pi":
            argv = [program, "--mode", "rpc", *PI_FLAGS]
        elif name in ACP:
            argv = [program, "acp" if name == "opencode" else "--acp"]
        else:
            argv = [program, "app-server"]
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        if name == "claude":
            self.write({"type": "control_request", "request_id": "i", "request": {"subtype": "initialize"}})
            self.until(lambda m: m.get("type") == "control_response")
        elif name == "pi":
            self.write({"id": "s", "type": "get_state"})
            self.until(lambda m: m.get("id") == "s")
        elif name in ACP:  # what mu-bridge's ACP client does: initialize, a session, its never-ask mode
            self.write({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {
                "protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False},
                                                             "terminal": False}}})
            self.until(lambda m: m.get("id") == "i")
            self.write({"jsonrpc": "2.0", "id": "s", "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}})
            self.session = self.until(lambda m: m.get("id") == "s")["result"]["sessionId"]
            self.write({"jsonrpc": "2.0", "id": "m", "method": "session/set_mode",
                        "params": {"sessionId": self.session, "modeId": "yolo"}})
            self.until(lambda m: m.get("id") == "m")
        else:
            self.write({"jsonrpc": "2.0", "id": "i", "method": "initialize",
                        "params": {"clientInfo": {"name": "bench", "version": "1"}}})
            self.until(lambda m: m.get("id") == "i")
            self.write({"jsonrpc": "2.0", "method": "initialized"})
            self.write({"jsonrpc": "2.0", "id": "t", "method": "thread/start",
                        "params": {"cwd": cwd, "approvalPolicy": "untrusted", "sandbox": "danger-full-access"}})
            self.thread = self.until(lambda m: m.get("id") == "t")["result"]["thread"]["id"]
        self.ready_s = time.time() - started

    def write(self, value: dict) -> None:
        self.proc.stdin.write(json.dumps(value).encode() + b"\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def until(self, done: Callable[[dict], bool]) -> dict:
        for raw in self.proc.stdout:  # type: ignore[union-attr]
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            if isinstance(message, dict) and done(message):
                return message
            if isinstance(message, dict) and "id" in message and isinstance(message.get("method"), str):
                # a request of the agent's (an ACP agent's own extension): not served, as the bridge answers
                self.write({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "not found"}})
        raise RuntimeError(f"{self.name} ended: {self.proc.wait()}")

    def turn(self, text: str) -> Tuple[float, float]:
        """Give one message; (the time it was given, the time its end of
        turn was read), time.time()."""
        self.n += 1
        given = time.time()
        key = str(uuid.uuid4())
        if self.name == "claude":
            self.write({"type": "user", "uuid": key, "session_id": "", "parent_tool_use_id": None,
                        "message": {"role": "user", "content": [{"type": "text", "text": text}]}})
            self.until(lambda m: m.get("type") == "result")
        elif self.name == "pi":
            self.write({"id": key, "type": "prompt", "message": text})
            self.until(lambda m: m.get("type") == "agent_end")
        elif self.name in ACP:
            self.write({"jsonrpc": "2.0", "id": key, "method": "session/prompt",
                        "params": {"sessionId": self.session, "prompt": [{"type": "text", "text": text}]}})
            self.until(lambda m: m.get("id") == key and "method" not in m)
        else:
            self.write({"jsonrpc": "2.0", "id": f"turn-{self.n}", "method": "turn/start",
                        "params": {"threadId": self.thread, "clientUserMessageId": key,
                                   "input": [{"type": "text", "text": text}]}})
            self.until(lambda m: m.get("method") == "turn/completed")
        return given, time.time()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


# -- the subject: the harness under mu ---------------------------------------------------


def run(argv: List[str], env: Dict[str, str], cwd: Optional[str] = None) -> str:
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[2:])} exited {done.returncode}: {done.stderr.decode()[:300]}")
    return done.stdout.decode()


def job_folder(agent: str, env: Dict[str, str], cwd: str) -> str:
    home = json.loads(run(mu("host", "status", "box", "--json"), env, cwd))["facts"]["path"]
    listed = json.loads(run(mu("agent", "list", "--json"), env, cwd))
    return os.path.join(home, "jobs", next(a["job"] for a in listed if a["agent"] == agent))


def wait_file(path: str) -> os.stat_result:
    until = time.monotonic() + TIMEOUT_S
    while time.monotonic() < until:
        try:
            return os.stat(path)
        except OSError:
            time.sleep(0.005)
    raise RuntimeError(f"{path} did not appear within {TIMEOUT_S:g} s")


def spawn_s(name: str, agent: str, env: Dict[str, str], cwd: str) -> float:
    """`mu agent spawn` from its start to the agent's turn record."""
    started = time.time_ns()
    run(mu("agent", "spawn", agent, "--host", "box", "--harness", name), env, cwd)
    ready = wait_file(os.path.join(job_folder(agent, env, cwd), "turn.json")).st_ctime_ns
    return (max(ready, started) - started) / 1e9


def record(folder: str) -> dict:
    try:
        with open(os.path.join(folder, "turn.json"), "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return {}


def idle_runs(folder: str) -> int:
    until = time.monotonic() + TIMEOUT_S
    while time.monotonic() < until:
        seen = record(folder)
        if seen.get("state") == "idle" and seen.get("turn") is None:
            return int(seen["runs"])
        time.sleep(0.01)
    raise RuntimeError(f"the agent in {folder} is not idle after {TIMEOUT_S:g} s")


def deliver(folder: str, text: str) -> None:
    msg_id = f"bench-{uuid.uuid4().hex}"
    aside = os.path.join(folder, "inbox", f".{msg_id}.json")
    with open(aside, "w") as f:
        json.dump({"msgId": msg_id, "kind": "send", "text": text, "at": int(time.time() * 1000)}, f)
    os.replace(aside, os.path.join(folder, "inbox", f"{msg_id}.json"))


def mu_turn(agent: str, folder: str, env: Dict[str, str], cwd: str, text: str) -> Tuple[float, float, float]:
    """One turn under mu: (the time the message was delivered, the time mu
    wait printed the event, the bridge's settle: turn.json's ctime), all
    time.time()."""
    from wait import plugin_ready

    after = idle_runs(folder)
    waiter = subprocess.Popen(mu("wait", agent, "--after", str(after), "--json"), env=env, cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        pidfd = plugin_ready(waiter)
        if pidfd is not None:
            os.close(pidfd)
        given = time.time()
        deliver(folder, text)
        line = waiter.stdout.readline()  # type: ignore[union-attr]  (the event's first line)
        printed = time.time()
        line += waiter.stdout.read()  # type: ignore[union-attr]
        waiter.wait(TIMEOUT_S)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    if waiter.returncode != 0 or b'"settled"' not in line:
        raise RuntimeError(f"mu wait exited {waiter.returncode}: {line[:200]!r} {waiter.stderr.read()[:300]!r}")
    return given, printed, os.stat(os.path.join(folder, "turn.json")).st_ctime_ns / 1e9


def bench_one(name: str, program: str, stub, opts: harness.Options) -> Tuple[List[Row], List[str]]:
    folder = tempfile.mkdtemp(prefix=f"mu-bench-{name}-")
    env = environment(name, program, stub, folder)
    env["MU_STATE_DIR"] = os.path.join(folder, "state")
    repo = os.path.join(folder, "repo")
    os.makedirs(repo)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env)
    run(mu("plugin", "add", "local", "--", LOCAL, "--root", os.path.join(folder, "root")), env, repo)
    run(mu("host", "acquire", "box", "--provider", "local"), env, repo)
    bare_cwd = os.path.join(folder, "bare")
    os.makedirs(bare_cwd)
    spawns, starts = [], []
    agents = []
    rounds = 2 if opts.quick else 15
    spawn_rounds = 1 if opts.quick else 4
    bare: Optional[Bare] = None
    try:
        for i in range(spawn_rounds):  # interleaved: bare start, spawn, spawn, bare start...
            for side in (("bare", "mu") if i % 2 == 0 else ("mu", "bare")):
                if side == "bare":
                    made = Bare(name, program, env, bare_cwd)
                    starts.append(made.ready_s)
                    made.stop()
                else:
                    agent = f"bench/{name}{i}"
                    spawns.append(spawn_s(name, agent, env, repo))
                    agents.append(agent)
        agent = agents[-1]
        folder_of = job_folder(agent, env, repo)
        bare = Bare(name, program, env, bare_cwd)
        spans: Dict[str, List[float]] = {"mu": [], "bare": [], "bridge": []}
        # the ACP agent asks the model more after its turn (suggestions, memory), so the
        # stub's last byte is no turn's end there: its span is the whole turn, message to end
        whole = name in ACP

        def subject() -> None:
            before = stub.last_byte
            given, printed, settled = mu_turn(agent, folder_of, env, repo, f"{TOOL.get(name, '')}mu round {len(spans['mu'])}")
            if stub.last_byte == before:
                raise RuntimeError("the stub answered nothing")
            start = given if whole else stub.last_byte
            spans["mu"].append(printed - start)
            spans["bridge"].append(settled - start)

        def floor() -> None:
            before = stub.last_byte
            given, done = bare.turn(f"{TOOL.get(name, '')}bare round {len(spans['bare'])}")  # type: ignore[union-attr]
            if stub.last_byte == before:
                raise RuntimeError("the stub answered nothing")
            spans["bare"].append(done - (given if whole else stub.last_byte))

        subject()  # warm-up: the first turn of a session, and mu's bytecode
        floor()
        spans = {"mu": [], "bare": [], "bridge": []}
        harness.interleave(rounds, {"floor": floor, "mu wait": subject})
    finally:
        if bare is not None:
            bare.stop()
        for made in agents:
            subprocess.run(mu("agent", "close", made), env=env, cwd=repo, capture_output=True, timeout=120)
        subprocess.run(mu("host", "release", "box"), env=env, cwd=repo, capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)
    end = {"claude": "`result`", "codex": "`turn/completed`", "pi": "`agent_end`",
           "qwen": "answer to `session/prompt`", "gemini": "answer to `session/prompt`",
           "opencode": "answer to `session/prompt`"}[name]
    first = {"claude": "`initialize`", "codex": "`thread/start`", "pi": "`get_state`"}.get(name, "`session/set_mode`")
    target = ACP_TARGET if name in ACP else TARGET
    start = "the message given" if name in ACP else "stub's last byte"
    rows = []
    for what, stat in (("median", harness.median), ("p90", lambda v: harness.percentile(v, 90))):
        floor_v, mine = stat(spans["bare"]), stat(spans["mu"])
        rows += [
            Row(f"{name}: {start} to the bare harness's {end} (floor), {what}", harness.ms(floor_v),
                harness.ms(floor_v), 1.0),
            Row(f"{name}: {start} to mu wait printing the event, {what}", harness.ms(mine),
                harness.ms(floor_v), mine / floor_v, f"<= {target}x", target),
        ]
    rows += [
        Row(f"{name}: the bare harness's start to its answer to {first} (floor), median",
            harness.ms(harness.median(starts)), harness.ms(harness.median(starts)), 1.0),
        Row(f"{name}: mu agent spawn --harness {name} to its turn record, median",
            harness.ms(harness.median(spawns)), harness.ms(harness.median(starts)),
            harness.median(spawns) / harness.median(starts)),
    ]
    notes = [f"{name}: {rounds} interleaved turns a side, {spawn_rounds} spawns and bare starts; of mu's span, the"
             f" bridge's settle (turn.json's ctime) comes a median {harness.ms(harness.median(spans['bridge']))}"
             f" after {start}, the rest is the local channel's watch and mu wait"]
    return rows, notes


def body(opts: harness.Options) -> None:
    from harnesses.stub_model import StubModel

    harness.private_state()
    rows: List[Row] = []
    notes: List[str] = []
    stub = StubModel().start()
    try:
        for name in (os.environ.get("MU_BENCH_HARNESSES") or "claude codex pi qwen gemini opencode").split():
            program = installed(name)
            if program is None:
                notes.append(f"{name}: not installed (sh tests/harnesses/install.sh installs it); not measured")
                continue
            mine, said = bench_one(name, program, stub, opts)
            rows += mine
            notes += said
    finally:
        stub.stop()
    notes.append(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    harness.print_table("bench 14: real harnesses behind mu-bridge, against the same harness driven bare", rows,
                        opts, notes)


if __name__ == "__main__":
    harness.run_main(body)
