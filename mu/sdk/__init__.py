"""mu.sdk: write a mu plugin in Python as one class.

A plugin is a class with one method per protocol method it serves; the SDK
does the rest of the plugin protocol (version 1, mu-plugin-protocol(7)):
the handshake with the digest of the schema shipped with this mu, the line
transport, a thread and a cancel token per call, `$/cancel`, `shutdown`,
stdin EOF, watch notifications, typed errors, and running commands that
leave nothing behind.  It imports only the standard library, and only what
a handshake needs until a handler asks for more, so a plugin built on it
starts about as fast as a bare script.

    from mu import sdk

    class Hello(sdk.Plugin):
        name = "hello"              # the registered name: mu-plugin-hello
        version = "0.1.0"
        seams = {"link": {...}}     # the declaration, sent verbatim

        @sdk.method("link.exec")
        def exec_(self, params, call):
            run = sdk.run_command(params["script"], "/some/dir", params["timeoutMs"], cancel=call)
            return run.reply()

    if __name__ == "__main__":
        sdk.run(Hello())

The public API:

- `Plugin`, `method(name)`, `run(plugin)`: the plugin and its server;
  `main(program, usage, parse, build)`: a plugin's `main` with its usage.
- `Call` (each handler's second argument: `cancelled`, `check()`,
  `deadline`, `remaining()`, `target`, `watch()`) and `Watch`
  (`settled()`, `restarted()`, `notify()`, `start()`, `cancelled`).
- `Retryable`, `Permanent`, `Human(message, remedy)`, `UnknownOutcome`,
  `Cancelled`, their base `PluginError`: raise one to answer an error of
  that ``data.kind``.
- `run_command(...) -> CommandResult`, `kill_tree(...)`: commands with a
  timeout, a cancel and output limits, in the plugin's own group.
- `DedupeWindow`, `LookupStore`: optional help for effects (exact dedupe
  and ``lookup``), see `mu.sdk.effects`.

One module is imported by name rather than through this one: `mu.sdk.procs`
(``from mu.sdk import procs``) finds and kills processes that outlive a
call, such as a job's, by a token in their environment.

docs/writing-plugins.md walks from an empty file to a plugin that passes
`mu plugin test`, and lists every name above; tests/test_guide.py keeps
that list equal to `__all__` (and to `procs`' public names).
"""

from __future__ import annotations

from mu.sdk.errors import Cancelled, Human, Permanent, PluginError, Retryable, UnknownOutcome
from mu.sdk.plugin import PROTOCOL_VERSION, Call, Plugin, Watch, main, method, registered_name, run

# Loaded on first use: subprocess, tempfile and typing would double a
# plugin's start-up, and most handshakes need none of them.
_LAZY = {
    "CommandResult": "mu.sdk.command",
    "run_command": "mu.sdk.command",
    "kill_tree": "mu.sdk.procs",
    "DedupeWindow": "mu.sdk.effects",
    "LookupStore": "mu.sdk.effects",
}

__all__ = [
    "PROTOCOL_VERSION",
    "Call",
    "Cancelled",
    "CommandResult",
    "DedupeWindow",
    "Human",
    "LookupStore",
    "Permanent",
    "Plugin",
    "PluginError",
    "Retryable",
    "UnknownOutcome",
    "Watch",
    "kill_tree",
    "main",
    "method",
    "registered_name",
    "run",
    "run_command",
]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError("module 'mu.sdk' has no attribute %r" % name)
    # __import__ with a fromlist is the module itself (importlib would import `warnings`)
    value = getattr(__import__(module, fromlist=(name,)), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))
