"""The load checks: whether mu can load the plugin at all.

protocol "Registration and trust" and "Handshake", "Load rules": the
executable passes the trust checks; it answers `initialize` with a result
within 10 s, before any invalid line; the result validates against the
schema; its name is the registered one (or, for a bare argv, its
basename's); its digest is the shipped schema's; its `instance` is 1-128
characters; its declaration keeps every load rule; and it is the one
`mu plugin add` recorded.  A failure here is a plugin mu refuses (exit 4),
and no other check runs.
"""

from __future__ import annotations

import os
from typing import Any, Dict

from mu import declaration, schema
from mu.contract.registry import Fail, Skip, check
from mu.errors import LoadRuleError, MuError
from mu.protocol.constants import EXECUTABLE_PREFIX
from mu.runtime import trust

PREFIX = EXECUTABLE_PREFIX


@check("trust", section="Registration and trust", stage="load",
       summary="the executable is absolute, named mu-plugin-<name>, a regular file of yours, not writable by others")
def trusted(session) -> str:
    path = session.argv[0]
    base = os.path.basename(path)
    if not base.startswith(PREFIX):
        raise Fail(f"an executable named {PREFIX}<name>", repr(base))
    try:
        trust.check_name(session.name)
        trust.check_executable(session.name, path)
    except MuError as e:
        raise Fail("an executable mu may run", e.message) from None
    return ""


@check("handshake.answer", section="Handshake", stage="load",
       summary="initialize gets a result within 10 s, with no invalid line before it")
def answer(session) -> str:
    session.load()
    if session.handshake_failure:
        raise Fail("a result to initialize within 10 s", session.handshake_failure)
    return ""


def _reply(session) -> Dict[str, Any]:
    if session.handshake is None:
        raise Skip("no handshake reply to check")
    if not isinstance(session.handshake, dict):
        raise Fail("an object", f"JSON {type(session.handshake).__name__}")
    return session.handshake


@check("handshake.schema", section="Handshake", stage="load",
       summary="the reply validates against the protocol's schema")
def matches_schema(session) -> str:
    reply = _reply(session)
    try:
        schema.validate_initialize_result(reply)
    except schema.SchemaViolation as e:
        raise Fail("a reply that matches the schema", str(e)) from None
    return ""


@check("handshake.name", section="Load rules", stage="load",
       summary="plugin.name is the registered name (for a bare argv, the basename's)")
def name(session) -> str:
    reply = _reply(session)
    plugin = reply.get("plugin")
    given = plugin.get("name") if isinstance(plugin, dict) else None
    if given != session.name:
        raise Fail(f"the name {session.name!r}", "no name" if given is None else repr(given))
    return ""


@check("handshake.digest", section="Handshake", stage="load",
       summary="schema is sha256: and the hex digest of the shipped schema file")
def digest(session) -> str:
    given = _reply(session).get("schema")
    if given != schema.schema_digest():
        raise Fail(schema.schema_digest(), "no digest" if given is None else repr(given))
    return ""


@check("handshake.instance", section="Handshake", stage="load",
       summary="instance is a string of 1 to 128 characters")
def instance(session) -> str:
    given = _reply(session).get("instance")
    if not isinstance(given, str):
        raise Fail("a string of 1 to 128 characters", "no instance" if given is None else f"{given!r}")
    if not 1 <= len(given) <= 128:
        raise Fail("a string of 1 to 128 characters", f"{len(given)} characters")
    return f"instance {given!r}"


@check("handshake.load-rules", section="Load rules", stage="load",
       summary="the protocol version is mu's and the declaration keeps every load rule")
def load_rules(session) -> str:
    reply = _reply(session)
    try:
        schema.validate_initialize_result(reply)
    except schema.SchemaViolation:
        raise Skip("the reply does not match the schema (handshake.schema)") from None
    # The name and the digest have checks of their own; this one judges
    # the rest of the rules, so a wrong name is not reported twice.
    probe = dict(reply, plugin=dict(reply["plugin"], name=session.name), schema=schema.schema_digest())
    try:
        declaration.check_handshake(probe, expected_name=session.name)
    except LoadRuleError as e:
        raise Fail("a declaration that keeps every load rule", e.message) from None
    return "seams " + ", ".join(s for s in schema.SEAMS if s in reply["seams"])


@check("handshake.recorded", section="Load rules", stage="load",
       summary="the declaration is the one `mu plugin add` recorded")
def recorded(session) -> str:
    reply = _reply(session)
    if session.recorded is None:
        raise Skip("the plugin is not registered: no recorded declaration to compare")
    try:
        mine, theirs = declaration.declaration_of(reply), declaration.declaration_of(session.recorded)
    except (KeyError, TypeError):
        raise Skip("the reply does not match the schema (handshake.schema)") from None
    if mine != theirs:
        changed = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        raise Fail("the declaration `mu plugin add` recorded", f"another one (it differs in {', '.join(changed)})")
    return ""
