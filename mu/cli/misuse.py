"""What was wrong with a command line docopt refused, in the words a person
needs: the option it does not know (and the one meant), the option given
without its value, the command word that is not one (and the one meant).

docopt says only that the line does not match; this reads the verb's own
usage text (its usage lines and its options list, the text `mu help
<verb>` prints) and the words given, and names the first thing it can
tell was wrong.  When it can tell nothing, the caller keeps docopt's
answer ("bad usage").  Pure functions: no I/O, nothing imported that a
refusal would not need.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Optional, Tuple

from mu.names import closest

_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?:[ =](<[^>]+>))?")


def meant(word: str, known: Iterable[str]) -> str:
    """" (did you mean X?)" for the known word `word` was a slip of, else ""."""
    guess = closest(word, known)
    return f" (did you mean {guess}?)" if guess else ""


def options_of(doc: str) -> Dict[str, bool]:
    """Every option the usage text names, each with whether it takes a value."""
    found: Dict[str, bool] = {}
    for name, value in _OPTION.findall(doc):
        found[name] = found.get(name, False) or bool(value)
    return found


def commands_of(doc: str, verb: str) -> List[str]:
    """The command words of a group's usage lines (`mu agent spawn ...` gives
    spawn), in order; empty for a verb without them."""
    words: List[str] = []
    for line in doc.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[0] == "mu" and parts[1] == verb and re.fullmatch(r"[a-z][a-z-]*", parts[2]):
            if parts[2] not in words:
                words.append(parts[2])
    return words


def explain(doc: str, argv: List[str]) -> Optional[Tuple[str, str]]:
    """(the error, its remedy) for `argv` (the verb first) against the verb's
    usage text, or None when nothing in particular can be named."""
    verb = argv[0]
    known = options_of(doc)
    commands = commands_of(doc, verb)
    words = argv[1:]
    if commands and words and not words[0].startswith("-") and words[0] not in commands:
        return (f"{words[0]!r} is not a `mu {verb}` command{meant(words[0], commands)}",
                f"the commands: {', '.join(commands)} (`mu help {verb}`)")
    for i, word in enumerate(words):
        if word == "--":
            break  # the rest are texts, never options
        if not word.startswith("-") or word == "-":
            continue
        name = word.split("=", 1)[0] if word.startswith("--") else word[:2]
        if name not in known:
            guess = meant(name, known)
            if "[--]" in doc and (not guess or any(c.isspace() for c in word)):
                # a text that begins with -: the usage takes it after --
                import shlex

                typed = " ".join(shlex.quote(w) for w in ["mu", verb, *words[:i], "--", *words[i:]])
                return (f"unknown option {name} for `mu {verb}`{guess}",
                        f"a text that begins with - goes after --: `{typed}`")
            return (f"unknown option {name} for `mu {verb}`{guess}", f"`mu help {verb}` lists its options")
        takes_value = known[name]
        inline = "=" in word if word.startswith("--") else len(word) > 2
        if takes_value and not inline and (i + 1 >= len(words) or words[i + 1].startswith("--")):
            value = _value_name(doc, name)
            return (f"{name} needs a value{(' ' + value) if value else ''}",
                    f"`mu help {verb}` says what it takes")
    return _against_the_lines(doc, verb, commands, words, known)


def _against_the_lines(doc: str, verb: str, commands: List[str], words: List[str],
                       known: Dict[str, bool]) -> Optional[Tuple[str, str]]:
    """Too many words, too few, or a required option missing, when every
    usage line of the command says so alike."""
    lines = [line.split()[2:] for line in doc.splitlines()
             if line.split()[:2] == ["mu", verb]]
    command = f"mu {verb}"
    if commands:
        if not words:
            return f"`{command}` needs a command: {', '.join(commands)}", f"`mu help {verb}` prints its usage"
        lines = [line[1:] for line in lines if line and line[0] == words[0]]
        command, words = f"{command} {words[0]}", words[1:]
    if not lines:
        return None
    given, flags, i = [], set(), 0
    while i < len(words):
        word = words[i]
        if word == "--":
            early = _before_the_dash(lines, command, words, len(given), i)
            if early is not None:
                return early
            given += words[i + 1:]
            break
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0] if word.startswith("--") else word[:2]
            flags.add(name)
            inline = "=" in word if word.startswith("--") else len(word) > 2
            i += 2 if known.get(name) and not inline else 1
            continue
        given.append(word)
        i += 1
    shapes = [_shape(line) for line in lines]
    if all(most is not None and len(given) > most for _needed, most, _options in shapes):
        most = max(m for _needed, m, _options in shapes)
        return (f"`{command}` takes {' '.join(shapes[0][0]) or 'no word'} besides its options;"
                f" {given[most]!r} is one word too many",
                "quote a text that holds spaces, as one word, or give - to read it from standard input"
                if any("text" in name for name in shapes[0][0]) else f"`mu help {verb}` prints its usage")
    if all(len(given) < len(needed) for needed, _most, _options in shapes):
        needed = min((n for n, _most, _options in shapes), key=len)
        return (f"`{command}` needs {' '.join(needed)}", f"`mu help {verb}` prints its usage")
    for _needed, _most, options in shapes:
        missing = [(name, value) for name, value in options if name not in flags]
        if missing and len(shapes) == 1:
            name, value = missing[0]
            return f"`{command}` needs {name}{(' ' + value) if value else ''}", f"`mu help {verb}` prints its usage"
    return None


def _before_the_dash(lines: List[List[str]], command: str, words: List[str], given: int,
                     at: int) -> Optional[Tuple[str, str]]:
    """A `--` typed before the words the usage puts ahead of it (`mu send --
    ws/e x`): what goes first, and the line with them moved there."""
    ahead = [line[:line.index("[--]")] for line in lines if "[--]" in line]
    if len(ahead) != len(lines):
        return None
    needed = [token for token in ahead[0] if token.startswith("<")]
    if given >= len(needed) or len(words) - at - 1 <= len(needed) - given:
        return None
    import shlex

    moved = [*words[:at], *words[at + 1:at + 1 + len(needed) - given], "--", *words[at + 1 + len(needed) - given:]]
    return (f"`{command}` takes {' '.join(needed)} before --",
            f"as in `{' '.join(shlex.quote(w) for w in [*command.split(), *moved])}`")


def _shape(tokens: List[str]) -> Tuple[List[str], Optional[int], List[Tuple[str, str]]]:
    """(the positional words a usage line needs, by name; the most it takes,
    or None for any number; the options it requires), from its tokens:
    what is outside [...] is required; `<x>...` repeats."""
    needed, most, depth, options = [], 0, 0, []
    unlimited = False
    for n, token in enumerate(tokens):
        bare = token.strip("[]()|")
        opening = token.count("[")
        if bare.startswith("<") and bare.rstrip(".").endswith(">"):
            previous = tokens[n - 1].strip("[]()") if n else ""
            if not previous.startswith("-") or previous == "--":  # not an option's value
                most += 1
                if depth + opening == 0:
                    needed.append(bare)
                if bare.endswith("..."):
                    unlimited = True
        elif bare.startswith("-") and depth + opening == 0 and "|" not in token:
            value = tokens[n + 1].strip("[]().") if n + 1 < len(tokens) and tokens[n + 1].startswith("<") else ""
            options.append((bare.rstrip("."), value))
        depth += opening - token.count("]")
    return needed, (None if unlimited else most), options


def _value_name(doc: str, option: str) -> str:
    match = re.search(re.escape(option) + r"[ =](<[^>]+>)", doc)
    return match.group(1) if match else ""
