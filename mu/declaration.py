"""The load rules: whether mu accepts what a plugin declared in its handshake.

`check_handshake` passes a handshake reply only if it breaks none of the
bullets of protocol "Load rules" that the reply alone can decide; the
refusal (`LoadRuleError`, exit 4) names the rule broken, in one line.  Two
bullets are left to the caller, because they need more than the reply: a
handshake answered with an error (there is no reply to check;
`handshake_error` words that refusal), and a declaration that differs from
the one `mu plugin add` recorded (compare `declaration_of` of both).

The rules are checked in the order the protocol lists them, so a reply
that breaks several is refused for the first: the protocol version before
anything else (another version may have another shape), then the name and
the schema digest, then the schema itself, and only then the rules between
seams, which rely on the shape the schema guarantees.

Readings of the text, where it needs one:

- "a channel declares `watch` other than `stream`, `settleText: "none"`,
  or a `fence` other than `none`" is three refusals, any one of which
  refuses: a watch that is not `stream`; a settleText that is `none`; a
  fence that is not `none`.  "other than" cannot distribute over the list,
  since `settleText: "none"` is not a value of `watch`.  So this build
  accepts only a streaming, unfenced channel that reports settled text;
  the schema still knows the other values, so a channel that declares one
  is refused by this rule, not as malformed.
- "exact `dedupe`" is `dedupe.exact: true`; a dedupe with `exact: false` is
  well formed but does not count (protocol "Effects and replay" resends
  only "if dedupe is exact").
- `job.channel` is optional (a kind without one is refused at spawn, not at
  load); when present it must name this plugin's channel seam, so a job
  that names a channel while the plugin declares none breaks that rule.
- "`honours.env: false` without a `channel`" is a job whose `honours.env`
  is false and that names no channel.
"""

from __future__ import annotations

import copy
from typing import AbstractSet

from mu import schema
from mu.errors import LoadRuleError
from mu.protocol.constants import PROTOCOL_MAX, PROTOCOL_MIN

_RULES = '(protocol "Load rules")'


def check_handshake(result: object, *, expected_name: str, needed_seams: AbstractSet[str] = frozenset()) -> None:
    """Refuse the handshake `result` unless it keeps every load rule.

    `expected_name` is the registered name; `needed_seams` the seams the
    registration or a host needs of this plugin (e.g. ``{"link"}`` for a
    ``--plugin`` host profile).  Raises LoadRuleError naming the rule.
    """
    unknown = set(needed_seams) - set(schema.SEAMS)
    if unknown:
        raise ValueError(f"no such seam: {', '.join(sorted(unknown))}")
    who = f"plugin {expected_name!r}"

    def refuse(what: str) -> LoadRuleError:
        return LoadRuleError(f"{who} {what} {_RULES}")

    if not isinstance(result, dict):
        raise refuse(f"answered the handshake with {_json_type(result)}, not an object")

    # Rule: the protocol version is outside mu's range.
    version = result.get("protocol")
    if not _is_int(version) or not PROTOCOL_MIN <= version <= PROTOCOL_MAX:
        chose = "no protocol version" if version is None else f"protocol version {_show(version)}"
        raise refuse(f"chose {chose}, outside mu's range {PROTOCOL_MIN}..{PROTOCOL_MAX}")

    # Rule: its name is not the registered name, or its schema digest is not
    # the published file's.
    plugin = result.get("plugin")
    name = plugin.get("name") if isinstance(plugin, dict) else None
    if name != expected_name:
        named = "gives no name" if name is None else f"names itself {_show(name)}"
        raise refuse(f"{named}, not its registered name")
    digest = result.get("schema")
    if digest != schema.schema_digest():
        built = "sends no schema digest" if digest is None else f"sends schema digest {_show(digest)}"
        raise refuse(f"{built}, not the published file's {schema.schema_digest()}")

    # Rule: the declaration does not match the schema.
    try:
        schema.validate_initialize_result(result)
    except schema.SchemaViolation as e:
        raise refuse(f"sends a declaration that does not match the schema ({_schema_rule(e)}): {e}") from None

    seams = result["seams"]

    # Rule: no seam is declared, or a needed seam is missing.
    if not seams:
        raise refuse("declares no seam")
    missing = [s for s in schema.SEAMS if s in needed_seams and s not in seams]
    if missing:
        raise refuse(f"does not declare the {_and(missing)} seam{'s' if len(missing) > 1 else ''} it is needed for")

    # Rule: a host seam comes without link and job.
    if "host" in seams:
        lacking = [s for s in ("link", "job") if s not in seams]
        if lacking:
            raise refuse(f"declares a host seam without {_and(lacking)} (a host needs link and job)")

    # Rule: host.acquire, or job.start with handle "reply", declares neither
    # lookup nor exact dedupe: its unknown outcome could never be resolved.
    if "host" in seams and not _resolvable(seams["host"]["acquire"]):
        raise refuse("declares host.acquire with neither lookup nor exact dedupe")
    job = seams.get("job")
    if job is not None and job["handle"] == "reply" and not _resolvable(job["start"]):
        raise refuse("declares job.start with handle 'reply' but neither lookup nor exact dedupe")

    # Rule: a channel declares watch other than stream, settleText "none", or
    # a fence other than none (see the module docstring for this reading).
    channel = seams.get("channel")
    if channel is not None:
        caps = channel["caps"]
        if caps["watch"] != "stream":
            raise refuse(f"declares a channel whose watch is {_show(caps['watch'])}, not 'stream'")
        if caps["settleText"] == "none":
            raise refuse("declares a channel with settleText 'none'")
        if caps["fence"] != "none":
            raise refuse(f"declares a channel whose fence is {_show(caps['fence'])}, not 'none'")

    if job is not None:
        # Rule: job.channel is not the channel seam's name.
        if "channel" in job:
            if channel is None:
                raise refuse(f"declares job.channel {_show(job['channel'])} but no channel seam")
            if job["channel"] != channel["name"]:
                raise refuse(
                    f"declares job.channel {_show(job['channel'])}, not its channel seam's name "
                    f"{_show(channel['name'])}"
                )
        # Rule: firstTurn "at-start" without handle "reply", or honours.env
        # false without a channel.
        if job.get("firstTurn") == "at-start" and job["handle"] != "reply":
            raise refuse(f"declares firstTurn 'at-start' with handle {_show(job['handle'])}, not 'reply'")
        honours = job.get("honours")
        if honours is not None and honours["env"] is False and "channel" not in job:
            raise refuse("declares honours.env false without a channel")


def handshake_error(expected_name: str, detail: str) -> LoadRuleError:
    """The refusal for a handshake answered with an error (protocol "Load
    rules", first bullet); `detail` is the error's one-line message.  The
    caller raises it: only it sees the error reply."""
    return LoadRuleError(f"plugin {expected_name!r} answered the handshake with an error: {detail} {_RULES}")


def declaration_of(result: dict) -> dict:
    """The part of a handshake reply that must not change between
    `mu plugin add` and a later start (protocol "Load rules", last bullet).

    Leaves out `instance`, which is the fence and may change (records made
    under another instance are refused call by call), and `plugin.version`.
    """
    return {
        "protocol": result["protocol"],
        "plugin": {"name": result["plugin"]["name"]},
        "schema": result["schema"],
        "seams": copy.deepcopy(result["seams"]),
    }


def _resolvable(caps: dict) -> bool:
    # protocol "Effects and replay": lookup(key) if declared, else the
    # identical params again if dedupe is exact.
    dedupe = caps.get("dedupe")
    return caps["lookup"] is True or (dedupe is not None and dedupe["exact"] is True)


def _schema_rule(e: schema.SchemaViolation) -> str:
    # Name the protocol's own words for the failure: "a missing or unknown
    # field, an unknown seam or value".
    if e.keyword == "additionalProperties":
        return "an unknown seam" if e.path == "seams" else "an unknown field"
    if e.keyword == "required":
        return "a missing field"
    if e.keyword in ("enum", "const"):
        return "an unknown value"
    return "a bad value"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _show(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _and(words: list) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
