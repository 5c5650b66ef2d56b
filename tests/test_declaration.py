"""The load rules of protocol "Load rules": a good declaration passes, and
each rule broken refuses the plugin with a message that names that rule."""

from __future__ import annotations

import copy

import pytest

from mu import declaration, errors, schema

NAME = "sandbox"

GOOD = {
    "protocol": 1,
    "plugin": {"name": NAME, "version": "2.3.1"},
    "instance": "prod-eu",
    "schema": schema.schema_digest(),
    "seams": {
        "link": {
            "fetch": True,
            "push": True,
            "slots": "mu",
            "remoteOnTimeout": "stopping",
            "quiescence": "unprovable",
            "maxScriptBytes": 262144,
            "checks": ["template", "reach"],
        },
        "job": {
            "kind": "sandbox-pi",
            "view": "detached",
            "handle": "reply",
            "start": {"lookup": True, "fenceKey": True, "inFlightMs": 30000},
            "channel": "sandbox-pi",
            "checks": ["agent"],
            "firstTurn": "at-start",
            "outlivesHost": False,
            "honours": {"command": True, "env": False, "sockets": False, "roles": ["full-access"]},
        },
        "host": {"acquire": {"lookup": False, "fenceKey": False, "dedupe": {"exact": True, "windowMs": 600000}}},
        "channel": {
            "name": "sandbox-pi",
            "caps": {
                "fence": "none",
                "receipt": "exact",
                "dedupe": "exact",
                "steer": "native",
                "interrupt": "native",
                "fresh": "in-place",
                "answer": True,
                "command": True,
                "watch": "stream",
                "settleText": "full",
            },
        },
    },
}


def good() -> dict:
    return copy.deepcopy(GOOD)


def refusal(result, needed=frozenset(), name=NAME) -> str:
    with pytest.raises(errors.LoadRuleError) as caught:
        declaration.check_handshake(result, expected_name=name, needed_seams=needed)
    err = caught.value
    assert err.exit_code == errors.EXIT_REFUSED_PLUGIN == 4
    assert "\n" not in err.message
    assert err.message.startswith(f"plugin {name!r} ")
    assert err.message.endswith('(protocol "Load rules")')
    return err.message


# -- passing ---------------------------------------------------------------------


def test_good_declaration_passes():
    declaration.check_handshake(good(), expected_name=NAME, needed_seams={"link", "job", "host", "channel"})


def test_link_only_declaration_passes():
    result = {
        "protocol": 1,
        "plugin": {"name": "box", "version": "0.1.0"},
        "instance": "prod-eu",
        "schema": schema.schema_digest(),
        "seams": {
            "link": {
                "fetch": False,
                "slots": "self",
                "remoteOnTimeout": "unknown",
                "quiescence": "provable",
                "maxScriptBytes": 131072,
                "checks": ["reach"],
            }
        },
    }
    declaration.check_handshake(result, expected_name="box", needed_seams=frozenset({"link"}))


def test_a_pane_job_needs_no_lookup_and_honours_absent_needs_no_channel():
    result = good()
    job = result["seams"]["job"]
    job.update(handle="pane", start={"lookup": False, "fenceKey": False}, firstTurn="on-send")
    del job["channel"], job["honours"]
    declaration.check_handshake(result, expected_name=NAME)


def test_a_lookup_makes_acquire_resolvable_whatever_its_dedupe():
    result = good()
    result["seams"]["host"]["acquire"] = {"lookup": True, "fenceKey": True, "dedupe": {"exact": False, "windowMs": 5}}
    declaration.check_handshake(result, expected_name=NAME)


# -- each rule ---------------------------------------------------------------------


def _set(path, value):
    def mutate(d):
        *parents, last = path
        for key in parents:
            d = d[key]
        d[last] = value

    return mutate


def _del(path):
    def mutate(d):
        *parents, last = path
        for key in parents:
            d = d[key]
        del d[last]

    return mutate


def _all(*mutations):
    def mutate(d):
        for m in mutations:
            m(d)

    return mutate


RULES = [
    # (id, mutation, needed seams, words the message must hold)
    ("protocol 2", _set(["protocol"], 2), (), ["protocol version 2", "outside mu's range 1..1"]),
    ("protocol 0", _set(["protocol"], 0), (), ["outside mu's range"]),
    ("protocol missing", _del(["protocol"]), (), ["no protocol version", "outside mu's range"]),
    ("protocol as a string", _set(["protocol"], "1"), (), ["outside mu's range"]),
    ("protocol as a boolean", _set(["protocol"], True), (), ["outside mu's range"]),
    ("another name", _set(["plugin", "name"], "box"), (), ["names itself 'box'", "not its registered name"]),
    ("no name", _del(["plugin", "name"]), (), ["gives no name", "not its registered name"]),
    ("wrong digest", _set(["schema"], "sha256:" + "0" * 64), (), ["not the published file's"]),
    ("no digest", _del(["schema"]), (), ["no schema digest", "not the published file's"]),
    ("unknown seam", _set(["seams", "boat"], {}), (), ["does not match the schema", "unknown seam", "'boat'"]),
    (
        "unknown field",
        _set(["seams", "link", "colour"], "red"),
        (),
        ["does not match the schema", "unknown field", "seams.link", "'colour'"],
    ),
    (
        "unknown top-level field",
        _set(["extra"], 1),
        (),
        ["does not match the schema", "unknown field", "'extra'"],
    ),
    (
        "missing maxScriptBytes",
        _del(["seams", "link", "maxScriptBytes"]),
        (),
        ["does not match the schema", "missing field", "seams.link: 'maxScriptBytes' is a required property"],
    ),
    (
        "missing instance",
        _del(["instance"]),
        (),
        ["does not match the schema", "missing field", "'instance'"],
    ),
    (
        "bad enum value",
        _set(["seams", "job", "view"], "floating"),
        (),
        ["does not match the schema", "unknown value", "seams.job.view"],
    ),
    (
        "bad channel cap value",
        _set(["seams", "channel", "caps", "steer"], "maybe"),
        (),
        ["does not match the schema", "unknown value", "seams.channel.caps.steer"],
    ),
    ("instance of 0 chars", _set(["instance"], ""), (), ["does not match the schema", "instance: ''"]),
    ("instance of 129 chars", _set(["instance"], "i" * 129), (), ["does not match the schema", "instance:"]),
    ("no seams", _set(["seams"], {}), (), ["declares no seam"]),
    ("needed seam missing", _del(["seams", "channel"]), ("link", "channel"), ["does not declare the channel seam"]),
    (
        "needed seams missing",
        _all(_del(["seams", "host"]), _del(["seams", "job"])),
        ("host", "job"),
        ["does not declare the job and host seams"],
    ),
    ("host without link", _del(["seams", "link"]), (), ["declares a host seam without link"]),
    ("host without job", _del(["seams", "job"]), (), ["declares a host seam without job"]),
    (
        "host without link and job",
        _all(_del(["seams", "link"]), _del(["seams", "job"]), _del(["seams", "channel"])),
        (),
        ["declares a host seam without link and job"],
    ),
    (
        "acquire without lookup or dedupe",
        _del(["seams", "host", "acquire", "dedupe"]),
        (),
        ["host.acquire with neither lookup nor exact dedupe"],
    ),
    (
        "acquire dedupe not exact",
        _set(["seams", "host", "acquire", "dedupe", "exact"], False),
        (),
        ["host.acquire with neither lookup nor exact dedupe"],
    ),
    (
        "reply handle without lookup or dedupe",
        _set(["seams", "job", "start", "lookup"], False),
        (),
        ["job.start with handle 'reply' but neither lookup nor exact dedupe"],
    ),
    (
        "reply handle with an inexact dedupe",
        _all(
            _set(["seams", "job", "start", "lookup"], False),
            _set(["seams", "job", "start", "dedupe"], {"exact": False, "windowMs": 60000}),
        ),
        (),
        ["job.start with handle 'reply' but neither lookup nor exact dedupe"],
    ),
    (
        "channel watch not stream",
        _set(["seams", "channel", "caps", "watch"], "poll"),
        (),
        ["channel whose watch is 'poll', not 'stream'"],
    ),
    (
        "channel without watch",
        _set(["seams", "channel", "caps", "watch"], "none"),
        (),
        ["channel whose watch is 'none'"],
    ),
    (
        "channel settleText none",
        _set(["seams", "channel", "caps", "settleText"], "none"),
        (),
        ["channel with settleText 'none'"],
    ),
    (
        "channel with a fence",
        _set(["seams", "channel", "caps", "fence"], "incarnation"),
        (),
        ["channel whose fence is 'incarnation', not 'none'"],
    ),
    (
        "job.channel mismatch",
        _set(["seams", "job", "channel"], "other"),
        (),
        ["job.channel 'other', not its channel seam's name 'sandbox-pi'"],
    ),
    (
        "job.channel without a channel seam",
        _del(["seams", "channel"]),
        (),
        ["job.channel 'sandbox-pi' but no channel seam"],
    ),
    (
        "at-start without reply",
        _set(["seams", "job", "handle"], "file"),
        (),
        ["firstTurn 'at-start' with handle 'file', not 'reply'"],
    ),
    (
        "honours.env false without channel",
        _del(["seams", "job", "channel"]),
        (),
        ["honours.env false without a channel"],
    ),
]


@pytest.mark.parametrize("mutate, needed, words", [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_each_rule_refuses_and_names_itself(mutate, needed, words):
    result = good()
    mutate(result)
    message = refusal(result, frozenset(needed))
    for word in words:
        assert word in message


def test_not_an_object():
    for result in (None, [], "ok", 1):
        assert "answered the handshake with" in refusal(result)


def test_handshake_error_names_its_rule():
    err = declaration.handshake_error(NAME, "permanent: no credentials for prod-eu")
    assert isinstance(err, errors.LoadRuleError) and err.exit_code == 4
    assert err.message == (
        "plugin 'sandbox' answered the handshake with an error: permanent: no credentials for prod-eu"
        ' (protocol "Load rules")'
    )


def test_needed_seams_must_be_seams():
    with pytest.raises(ValueError):
        declaration.check_handshake(good(), expected_name=NAME, needed_seams={"boat"})
    with pytest.raises(ValueError):
        declaration.check_handshake(good(), expected_name=NAME, needed_seams="link")


def test_rules_come_in_the_protocols_order():
    # A reply that breaks both the version and the name is refused for the
    # version: another version may have another shape altogether.
    result = good()
    result["protocol"] = 2
    result["plugin"]["name"] = "box"
    assert "outside mu's range" in refusal(result)
    # The schema comes before the rules between seams, which rely on it.
    result = good()
    result["seams"]["host"]["acquire"]["dedupe"] = {"exact": "yes", "windowMs": 10}
    assert "does not match the schema" in refusal(result)


# -- the recorded declaration ------------------------------------------------------


def test_declaration_of_keeps_what_must_not_change():
    result = good()
    recorded = declaration.declaration_of(result)
    assert recorded == {
        "protocol": 1,
        "plugin": {"name": NAME},
        "schema": schema.schema_digest(),
        "seams": GOOD["seams"],
    }


def test_declaration_of_ignores_instance_and_version():
    a, b = good(), good()
    b["instance"] = "staging-us"
    b["plugin"]["version"] = "2.4.0"
    assert declaration.declaration_of(a) == declaration.declaration_of(b)
    b["seams"]["link"]["maxScriptBytes"] = 1024
    assert declaration.declaration_of(a) != declaration.declaration_of(b)


def test_declaration_of_is_a_copy():
    result = good()
    recorded = declaration.declaration_of(result)
    result["seams"]["link"]["checks"].append("agent")
    assert recorded["seams"]["link"]["checks"] == ["template", "reach"]
