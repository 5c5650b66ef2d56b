"""A blocked turn as a person acts on it: what the agent asks, the keys it
offers, and the exact `mu answer` that resolves it (mu-wait(1), mu-state(1)).

A channel reports a `blocked` turn with its pending dialog in `pending`
(protocol "The channel": a turn state is `blocked`, a pending dialog).
The text is the agent's; when it ends with ``(mu answer <agent> <keys>)``
(the bridges' words, and the demo agent's when its `/ask` names keys:
docs/local-provider.md) the keys are read from there, separated by
`` | ``; ``<your answer>`` there, or no such ending, means the agent
takes any text (no keys are offered).

What a caller may rely on: `of` never raises and never returns text with
a Python `None` in it; `command` always names the agent, so it can be run
as printed once a key is put in.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Dict, List, NamedTuple, Optional

FREE = "<your answer>"
_ENDING = re.compile(r"^(?P<question>.*?)\s*\(mu answer \S+ (?P<keys>[^()]*)\)\s*\Z", re.S)


class Block(NamedTuple):
    """One blocked turn: `question` (the agent's words, without the
    `mu answer` ending), `keys` (empty: any text answers it), `command`
    (the `mu answer` with the first key, or `<your answer>`), and
    `pending` (the channel's whole text)."""

    agent: str
    question: str
    keys: List[str]
    command: str
    pending: str

    @property
    def commands(self) -> List[str]:
        """One `mu answer` a key (the command alone when any text answers)."""
        if not self.keys:
            return [self.command]
        return [f"mu answer {shlex.quote(self.agent)} {shlex.quote(k)}" for k in self.keys]

    def as_json(self) -> Dict[str, Any]:
        return {"question": self.question, "keys": list(self.keys), "command": self.command,
                "pending": self.pending}

    def said(self) -> str:
        """What a person reads: what it asks, then how to answer it."""
        also = f" (keys: {' | '.join(self.keys)})" if len(self.keys) > 1 else ""
        return f"{self.question}: answer with `{self.command}`{also}"


def of(agent: str, pending: Optional[str]) -> Block:
    """The block of `agent` whose channel reported `pending` (None or empty:
    a blocked turn that did not say what it asks)."""
    text = pending.strip() if isinstance(pending, str) else ""
    question, keys = text, []
    found = _ENDING.match(text)
    if found:
        question = found.group("question").strip()
        keys = [k.strip() for k in found.group("keys").split("|") if k.strip() and k.strip() != FREE]
    question = question or "it waits on a question it did not name"
    first = shlex.quote(keys[0]) if keys else f"'{FREE}'"
    return Block(agent, question, keys, f"mu answer {shlex.quote(agent)} {first}", text)
