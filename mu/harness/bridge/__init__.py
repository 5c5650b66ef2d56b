"""mu-bridge: a real coding agent behind mu's turn files.

Usage: mu-bridge (claude | codex | pi | acp | qwen | gemini | opencode) [--dir <folder>] [--program <command line>]
                  [--role <role>] [--ask]
                  [--poll <seconds>] [--skill <encoded SKILL.md>] [-- <extra args>]

It runs as a job's process (in its pane).  It starts the harness in its
structured mode as its child, takes deliveries from the job folder's
inbox, and keeps taken/, turn.json and turns/ exactly as the demo agent
does (docs/local-provider.md, "Turn files"), so the local and SSH
providers' channels drive it unchanged.  The pane shows a readable
transcript: each message taken, the agent's text, its tool calls, a
pending question with the `mu answer` that resolves it, each settle.

Claude Code runs as `claude -p --input-format stream-json --output-format
stream-json --verbose --permission-prompt-tool stdio --session-id <id>`
(`--resume <id>` once the session has a transcript); Codex as `codex
app-server` (JSON-RPC: a thread, a turn per message); pi as `pi --mode
rpc`; an agent of the Agent Client Protocol (acp: the one --program or
$MU_HARNESS_ACP names; qwen: `qwen --acp`; gemini: `gemini --acp`;
opencode: `opencode acp`) with a session and a
`session/prompt` per message.  The program is --program, else
$MU_HARNESS_<NAME>, else the harness's program on PATH (acp has none: it
is refused, exit 2, without one); a command line (split as sh would
split it), so it can carry flags of its own.  Extra args after `--` follow the harness's own.

What a caller may rely on (docs/harnesses.md, "What the bridge writes"):

- turn.json appears only once the harness can take a message (Claude
  answered its `initialize`; Codex started its thread): a job whose turn
  record exists is ready.
- A message is given to the harness with a key derived from its msgId
  (uuid5): Claude's message `uuid`, Codex's `clientUserMessageId`, which
  each keeps in its session's transcript.
- Every settled turn counts (runs + 1), an interrupted or aborted one too,
  with its lastError: `interrupt` and `abort` settle the turn under way
  when they are taken, so a wait on it never hangs.
- A permission the harness asks for (`can_use_tool`) makes the turn
  `blocked` with the question in `pending`; an `answer` delivery whose
  first key is allow/yes/y allows it, deny/no/n denies it; any other keys
  deny it with the keys as the user's reply.  A question (Claude's
  AskUserQuestion, Codex's request_user_input) is `blocked` with its
  options as the keys, and the answer's keys are its answer.
- --role full-access (the default) never stops to ask: Claude runs with
  `--permission-mode bypassPermissions`, Codex with `approvalPolicy:
  never` and `sandbox: danger-full-access`, pi as it is.  --ask is the
  harness's own asking mode instead (Claude's default permission mode,
  Codex's `untrusted`), its permissions `blocked` until answered; pi
  cannot ask, and is refused --ask (exit 2).  --role read-only runs
  Claude with `--permission-mode plan` and Codex with `sandbox:
  read-only`, `approvalPolicy: untrusted`, in its plan mode, --ask or
  not.  A harness's own questions are `blocked` under every role.  A
  Claude that refuses bypassPermissions (as root, outside a sandbox)
  ends the bridge with exit 1 and one line naming why and what to set:
  it never asks instead (docs/harnesses.md, "Roles").
- --skill (a SKILL.md, zlib-compressed then base64, as mu's spawn gives
  it: the host needs no mu) is written under the job folder, never the
  person's configuration nor the working tree, and each harness is told
  of it for its session only: Claude Code with `--plugin-dir` (a plugin
  named mu, so the skill is `mu:mu`), Codex with `skills/extraRoots/set`
  before its thread, pi with `--skill` (docs/harnesses.md, "The mu skill").
- `fresh` starts a new session (a new --session-id) as incarnation + 1.
- A delivery is taken the moment it is renamed into the inbox (an inotify
  watch of it, on Linux); where no watch can be set, at the next look,
  every --poll seconds (0.05 by default), which also finds what a watch
  missed.
- A turn the harness begins itself (Claude reporting a background task, a
  pi extension's prompt) is a run like any other: busy, then settled with
  its text, runs + 1; its record has kind "own" and no msgIds.
- The harness's retries of a model it cannot reach are printed to the pane
  and set the open turn's lastError; a turn it gives up on settles with
  its error as lastError (docs/harnesses.md, "When the model cannot be
  reached").
- A harness that exits is started again, resuming its session: the turn
  under way settles with lastError "the harness exited (...)", and the
  incarnation stays.  When it cannot be resumed, a new session starts as
  incarnation + 1 (which `mu wait` reports as restarted).

It exits 0 on SIGTERM, SIGHUP or SIGINT (ending the harness first), and
when its inbox folder goes away; 2 on bad usage.  Standard library only,
Python 3.9 or newer: it imports nothing of mu, and its modules import one
another relatively, so the package also runs under another name, as the
zipapp mu's SSH and podman plugins put on a host that has only python3
(mu/plugins/shellhost/job.py).

The package: common.py (constants, BridgeError, the shared helpers, the
skill), turnfiles.py (the turn files' reads and atomic writes), harness.py
(the Harness base every harness extends, and the events it reports),
loop.py (the Bridge, `main`, and HARNESSES: the harnesses by name),
one module per harness (claude.py, codex.py, pi.py, acp.py), and demo.py,
the demo agent (`mu-bridge demo`: examples/mu-demo-agent runs it), which
keeps its turn files with the same turnfiles.py.  A new harness is a
module with a Harness subclass, and its line in loop.HARNESSES.
"""

import sys


def main(argv=None):
    """mu-bridge's command line: `demo` runs the demo agent (demo.py), any
    other first argument a harness (loop.py).  Each is imported only when
    it runs, so the demo agent starts without the harnesses' modules."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["demo"]:
        from .demo import main as demo

        return demo(args[1:])
    from .loop import main as bridge

    return bridge(args)


__all__ = ["main"]
