"""The words a shell may complete a mu command line with: what the scripts
of `mu completion bash|zsh|fish` ask for at each Tab, as
`mu completion words -- <the words typed, the last one partly>`.

A person waits for this answer with the cursor in the line, so it is read
lean, as the glances are (docs/DECISIONS.md, "Lean read paths"): `main`
calls `answer` before anything else is imported, the usage a verb has is
read from its module's file as text (never imported: a group's module
imports what its verb runs), and the names come from one read of the
database through `_sqlite3` alone, of the one kind the word is.  No
docopt, no `re`, no `typing`.  Whatever goes wrong (no database yet, a
file that cannot be read) completes nothing: a Tab never prints an error.

What completes: the verbs; a group's commands; the options of the usage
lines of the command typed; an option's value and a word of the line by
what its usage calls it (`<agent>`, `--host <host>`: the names mu
knows; `--harness <h>`: the harnesses; `--role`, `--status`, `--phase`:
their words; `<verb>`: the verbs).
"""

from __future__ import annotations

import os
import sys

# the harnesses a spawn knows (mu.agents.spawn.HARNESSES: a test holds the
# two alike; importing that module would cost a Tab its imports)
HARNESSES = ("sh", "demo", "claude", "codex", "pi", "acp", "qwen", "gemini", "opencode")
# the words some options take, copied the same way (the roles of
# mu.harness.bridge.common.ROLES, mu.store.tasks.STATUSES, mu.seams.checks.PHASES)
FIXED = {
    "--role": ("full-access", "read-only"),
    "--status": ("open", "in-progress", "closed", "rejected", "deferred"),
    "--phase": ("template", "reach", "agent"),
}
# mu's own verbs, beside its groups' (mu.cli.main.GROUPS, which the caller
# passes: this module is below the command line's table, never above it)
OWN_VERBS = ("help", "version")

# an option's value, by the option: the kind of name it is
_BY_OPTION = {
    "--host": "host", "--provider": "plugin", "--plugin": "plugin", "--harness": "harness", "--task": "task",
    "--blocked-by": "task", "--by": "task", "--for": "agent", "--workstream": "workstream",
}
# a word of the line, by what its usage calls it
_BY_WORD = {
    "<agent>": "agent", "<task>": "task", "<host>": "host", "<plugin>": "plugin", "<workstream>": "workstream",
    "<verb>": "verb",
}
# `<name>` is a host's in `mu host`, a plugin's in `mu plugin`
_NAME_OF = {"host": "host", "plugin": "plugin"}
# what each kind of name is, read from the database
_QUERIES = {
    "agent": "SELECT workstream || '/' || name FROM agents",
    "task": "SELECT id FROM tasks",
    "host": "SELECT name FROM hosts WHERE state != 'released' UNION SELECT name FROM host_profiles",
    "plugin": "SELECT name FROM plugins",
    "workstream": "SELECT workstream FROM agents UNION SELECT workstream FROM tasks",
}
# commands of a group a person does not type (the scripts' own)
_HIDDEN = ("words",)


def answer(words: list, groups: dict) -> int:
    """Print the completions of the last of `words` (the line after `mu`,
    the last word the one under the cursor, maybe empty), one a line;
    `groups`: each verb's module (mu.cli.main.GROUPS)."""
    if words and words[0] == "--":
        words = words[1:]
    before, current = words[:-1], (words[-1] if words else "")
    try:
        found = candidates(before, current, groups)
    except Exception:
        found = []  # a Tab never prints an error
    out = "".join(word + "\n" for word in found if word.startswith(current))
    try:
        sys.stdout.write(out)
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        pass
    return 0


def candidates(before: list, current: str, groups: dict) -> list:
    """Every word that may stand where `current` is, after `before`."""
    verbs = sorted(tuple(groups) + OWN_VERBS)
    if not before:
        return ["--help", "--version"] if current.startswith("-") else verbs
    verb = before[0]
    if verb == "help":
        return verbs if len(before) == 1 else []
    if verb not in groups:
        return []
    usage = _usage(groups[verb])
    commands = [c for c in _commands(usage, verb) if c not in _HIDDEN]
    rest = before[1:]
    if commands and not rest:
        return [] if current.startswith("-") else commands
    lines = _lines(usage, verb, rest[0] if commands else None)
    if commands:
        rest = rest[1:]
    if "--" in rest:
        return []  # after `--`, words are texts and argv: nothing to name
    takes = _valued(lines)
    if rest and rest[-1] in takes:
        if rest[-1] in FIXED:
            return list(FIXED[rest[-1]])
        kind = _BY_OPTION.get(rest[-1])
        return _names(kind) if kind else []
    if current.startswith("-"):
        given = set(rest)
        return [o for o in _options(lines) if o not in given or _repeats(lines, o)]
    index = _positionals(rest, takes)
    kinds = {_kind(line[index], verb) for line in (_words(line) for line in lines) if index < len(line)}
    kinds.discard(None)
    return sorted({name for kind in kinds for name in (verbs if kind == "verb" else _names(kind))})


def _usage(module: str) -> str:
    """A group's usage text, read from its module's file."""
    path = os.path.join(os.path.dirname(__file__), module.rsplit(".", 1)[1] + ".py")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        start = text.index('"""') + 3
        return text[start:text.index('"""', start)]
    except (OSError, ValueError):
        __import__(module)  # installed without its sources: the docstring, imported
        return sys.modules[module].__doc__ or ""


def _usage_lines(usage: str, verb: str) -> list:
    return [line.split()[2:] for line in usage.splitlines() if line.split()[:2] == ["mu", verb]]


def _commands(usage: str, verb: str) -> list:
    found: list = []
    for tokens in _usage_lines(usage, verb):
        if tokens and tokens[0].isascii() and tokens[0].replace("-", "").isalpha() and tokens[0] not in found:
            found.append(tokens[0])
    return found


def _lines(usage: str, verb: str, command: object) -> list:
    """The usage lines of the command typed (its tokens after it)."""
    lines = _usage_lines(usage, verb)
    if command is None:
        return lines
    return [tokens[1:] for tokens in lines if tokens and tokens[0] == command]


def _bare(token: str) -> str:
    return token.strip("[]()|").rstrip(".").rstrip("]")


def _options(lines: list) -> list:
    found: list = []
    for tokens in lines:
        for token in tokens:
            for part in token.strip("[]()").split("|"):
                bare = _bare(part)
                if bare.startswith("-") and bare != "--" and bare not in found:
                    found.append(bare)
    return found


def _valued(lines: list) -> set:
    """The options that take a value (`--host <host>`)."""
    found = set()
    for tokens in lines:
        for token, following in zip(tokens, tokens[1:]):
            bare = _bare(token)
            if bare.startswith("-") and following.lstrip("[(").startswith("<"):
                found.add(bare)
    return found


def _repeats(lines: list, option: str) -> bool:
    """Whether `option` may be given again (`[--env <k=v>]...`)."""
    for tokens in lines:
        for i, token in enumerate(tokens):
            if _bare(token) == option and "..." in token + "".join(tokens[i + 1:i + 2]):
                return True
    return False


def _words(tokens: list) -> list:
    """A usage line's positional words (`<agent>`), options and their values left out."""
    out: list = []
    skip = False
    for token in tokens:
        bare = _bare(token)
        if skip:
            skip = False
            continue
        if bare.startswith("-"):
            skip = bare != "--"
            if bare == "--":
                break
            continue
        if bare.startswith("<"):
            out.append(bare)
            if token.rstrip("])").endswith("..."):
                out.extend([bare] * 8)  # a word that repeats stands at every place after it
    return out


def _positionals(rest: list, takes: set) -> int:
    count, skip = 0, False
    for word in rest:
        if skip:
            skip = False
        elif word.startswith("-") and word != "-":
            skip = word in takes
        else:
            count += 1
    return count


def _kind(word: str, verb: str) -> object:
    if word == "<name>":
        return _NAME_OF.get(verb)
    return _BY_WORD.get(word)


def _names(kind: object) -> list:
    if kind == "harness":
        return list(HARNESSES)
    query = _QUERIES.get(kind)  # type: ignore[arg-type]
    if query is None:
        return []
    from mu import environment

    path = environment.db_path()
    if not os.path.isfile(path):
        return []  # no database yet: nothing to name, and a Tab makes none
    import _sqlite3  # the sqlite3 package imports datetime and more for adapters this never uses

    conn = _sqlite3.connect(path, isolation_level=None)
    try:
        return sorted(row[0] for row in conn.execute(query + " ORDER BY 1"))
    finally:
        conn.close()
