"""The shipped protocol schema: its file, its digest, and what its validators
accept and refuse."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from mu import schema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES_PATH = os.path.join(ROOT, "tests", "data", "protocol-examples.json")
TOP_LEVEL_SCHEMA = os.path.join(ROOT, "schemas", "plugin-protocol-v1.json")

# The digest every plugin built against this mu sends.  Changing the schema
# changes it for every plugin in the world: update this pin only on purpose.
PINNED_DIGEST = "sha256:" + "e72c8ad4417abefb8f9112581f011eebf7f44fadfee3335e0303a80405d8cc68"


def _examples() -> list:
    with open(EXAMPLES_PATH, encoding="utf-8") as f:
        return json.load(f)


def _validate_example(kind: str, value: object) -> None:
    if kind.startswith("notification:"):
        schema.validate_notification(kind[len("notification:") :], value)
    elif kind == "initialize.result":
        schema.validate_initialize_result(value)
    elif kind.endswith(".params"):
        schema.validate_params(kind[: -len(".params")], value)
    elif kind.endswith(".result"):
        schema.validate_result(kind[: -len(".result")], value)
    else:
        raise AssertionError(f"unknown example kind {kind!r}")


def _schema_json() -> dict:
    return json.loads(schema.schema_bytes())


# -- the file --------------------------------------------------------------------


def test_top_level_link_is_the_shipped_file_and_has_its_digest():
    assert os.path.islink(TOP_LEVEL_SCHEMA)
    assert os.path.samefile(TOP_LEVEL_SCHEMA, schema.SCHEMA_PATH)
    with open(TOP_LEVEL_SCHEMA, "rb") as f:
        data = f.read()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == schema.schema_digest()


def test_digest_is_pinned():
    assert schema.schema_digest() == PINNED_DIGEST


def test_file_is_pretty_printed_ascii_with_a_trailing_newline():
    data = schema.schema_bytes()
    data.decode("ascii")
    assert data == (json.dumps(json.loads(data), indent=2) + "\n").encode("ascii")


def test_schema_is_a_valid_draft_2020_12_schema():
    import jsonschema

    doc = _schema_json()
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(doc)


def test_every_ref_names_a_definition():
    defs = _schema_json()["$defs"]
    refs = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref":
                    refs.append(value)
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(defs)
    assert refs
    for ref in refs:
        assert ref.startswith("#/$defs/"), ref
        name = ref[len("#/$defs/") :].replace("~1", "/").replace("~0", "~")
        assert name in defs, ref


def test_every_method_has_params_and_result_and_every_notification_params():
    defs = _schema_json()["$defs"]
    for method in schema.METHODS + ("initialize",):
        assert method + ".params" in defs
        assert method + ".result" in defs
    for method in schema.NOTIFICATIONS + ("$/cancel",):
        assert method + ".params" in defs


def test_named_pieces_exist():
    defs = _schema_json()["$defs"]
    for name in (
        "target",
        "keyCapabilities",
        "linkSeam",
        "jobSeam",
        "hostSeam",
        "channelSeam",
        "seams",
        "initializeParams",
        "initializeResult",
        "errorData",
        "view",
        "observation",
        "steps",
    ):
        assert name in defs, name


# -- the method tables -------------------------------------------------------------


def test_method_sets_partition_the_seam_methods():
    assert len(set(schema.METHODS)) == len(schema.METHODS) == 25
    assert schema.EFFECT_METHODS == {
        "host.acquire",
        "host.release",
        "job.start",
        "job.stop",
        "channel.send",
        "channel.fresh",
        "channel.command",
        "channel.interrupt",
        "channel.abort",
        "channel.answer",
    }
    assert not schema.EFFECT_METHODS & schema.READ_METHODS
    host_actions = {"link.exec", "link.fetch", "link.push"}
    assert schema.EFFECT_METHODS | schema.READ_METHODS | host_actions == set(schema.METHODS)
    assert not host_actions & schema.READ_METHODS
    assert "link.checkSteps" in schema.READ_METHODS and "job.attach" in schema.READ_METHODS


def test_seam_of_method():
    assert set(schema.SEAM_OF_METHOD) == set(schema.METHODS)
    assert set(schema.SEAM_OF_METHOD.values()) == set(schema.SEAMS)
    assert schema.SEAM_OF_METHOD["host.acquire"] == "host"
    assert schema.SEAM_OF_METHOD["link.push"] == "link"
    assert schema.SEAM_OF_METHOD["job.checkSteps"] == "job"
    assert schema.SEAM_OF_METHOD["channel.answer"] == "channel"


def test_unknown_method_is_a_key_error_not_a_violation():
    with pytest.raises(KeyError):
        schema.validate_params("host.explode", {})
    with pytest.raises(KeyError):
        schema.validate_result("shutdown", None)
    with pytest.raises(KeyError):
        schema.validate_notification("host.acquire", {})
    with pytest.raises(KeyError):
        schema.validate_definition("noSuchThing", {})


# -- the examples ------------------------------------------------------------------


@pytest.mark.parametrize("example", _examples(), ids=lambda e: f"{e['kind']}: {e['what']}")
def test_example_is_valid(example):
    _validate_example(example["kind"], example["value"])


def test_examples_cover_every_method_and_notification():
    kinds = {e["kind"] for e in _examples()}
    wanted = {"initialize.params", "initialize.result"}
    wanted |= {m + ".params" for m in schema.METHODS} | {m + ".result" for m in schema.METHODS}
    wanted |= {"notification:" + n for n in schema.NOTIFICATIONS}
    assert wanted - kinds == set()
    assert all(e["what"] for e in _examples())


def test_examples_include_the_protocol_texts_handshake():
    examples = _examples()
    params = [e["value"] for e in examples if e["kind"] == "initialize.params"]
    assert {"protocol": {"min": 1, "max": 1}, "mu": "5"} in params
    replies = [e["value"] for e in examples if e["kind"] == "initialize.result"]
    text_reply = next(r for r in replies if r["plugin"] == {"name": "box", "version": "0.1.0"})
    assert text_reply["instance"] == "prod-eu"
    assert text_reply["seams"] == {
        "link": {
            "fetch": False,
            "slots": "self",
            "remoteOnTimeout": "unknown",
            "quiescence": "provable",
            "maxScriptBytes": 131072,
            "checks": ["reach"],
        }
    }


# -- refusals ----------------------------------------------------------------------


def _example(kind: str) -> dict:
    return json.loads(json.dumps(next(e["value"] for e in _examples() if e["kind"] == kind)))


def test_missing_field_names_its_path():
    reply = _example("initialize.result")
    del reply["seams"]["link"]["maxScriptBytes"]
    with pytest.raises(schema.SchemaViolation) as caught:
        schema.validate_initialize_result(reply)
    assert str(caught.value) == "seams.link: 'maxScriptBytes' is a required property"
    assert caught.value.path == "seams.link"
    assert caught.value.keyword == "required"
    assert isinstance(caught.value, ValueError)


def _violation(check, *args) -> schema.SchemaViolation:
    with pytest.raises(schema.SchemaViolation) as caught:
        check(*args)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 300
    return caught.value


def test_params_need_deadline_and_target():
    params = _example("host.release.params")
    del params["deadline"]
    assert "'deadline' is a required property" in str(_violation(schema.validate_params, "host.release", params))
    params = _example("host.release.params")
    del params["target"]
    assert "'target'" in str(_violation(schema.validate_params, "host.release", params))
    params = _example("host.release.params")
    params["deadline"] = "soon"
    assert _violation(schema.validate_params, "host.release", params).path == "deadline"
    params = _example("host.release.params")
    params["deadline"] = 1.5
    _violation(schema.validate_params, "host.release", params)


def test_target_is_strict():
    params = _example("job.status.params")
    params["target"]["host"]["zone"] = "eu"
    error = _violation(schema.validate_params, "job.status", params)
    assert error.path == "target.host" and error.keyword == "additionalProperties"
    params = _example("job.status.params")
    del params["target"]["host"]
    _violation(schema.validate_params, "job.status", params)
    params = _example("channel.baseline.params")
    params["target"]["agent"]["incarnation"] = "three"
    assert _violation(schema.validate_params, "channel.baseline", params).path == "target.agent.incarnation"


def test_unknown_param_is_refused():
    params = _example("link.exec.params")
    params["shell"] = "bash"
    _violation(schema.validate_params, "link.exec", params)


@pytest.mark.parametrize(
    "method",
    ["host.lookup", "job.lookup"],
)
def test_lookup_is_exactly_one_answer(method):
    for bad in ({}, {"pending": True, "none": True}, {"pending": False}, {"maybe": True}, {"unknown": ""}):
        _violation(schema.validate_result, method, bad)


def test_only_an_up_status_is_open():
    schema.validate_result("host.status", {"state": "up", "handle": "h", "gpu": {"count": 1}, "maxJobs": None})
    _violation(schema.validate_result, "host.status", {"state": "up"})
    _violation(schema.validate_result, "host.status", {"state": "gone", "reason": "x", "extra": 1})
    _violation(schema.validate_result, "host.status", {"state": "paused", "reason": "x"})
    _violation(schema.validate_result, "host.status", {"state": "needs-human"})
    _violation(schema.validate_result, "job.status", {"state": "running", "pid": 4})
    _violation(schema.validate_result, "job.status", {"state": "ended"})
    _violation(schema.validate_result, "job.status", {"reason": "no state"})


def test_error_data():
    for kind in ("retryable", "permanent", "unknown-outcome"):
        schema.validate_definition("errorData", {"kind": kind})
    schema.validate_definition("errorData", {"kind": "human", "remedy": "log in to the console"})
    assert "'remedy'" in str(_violation(schema.validate_definition, "errorData", {"kind": "human"}))
    assert _violation(schema.validate_definition, "errorData", {"kind": "fatal"}).path == "kind"
    _violation(schema.validate_definition, "errorData", {"kind": "permanent", "why": "x"})
    _violation(schema.validate_definition, "errorData", {})


def test_declaration_values():
    reply = _example("initialize.result")
    reply["instance"] = "x" * 128
    schema.validate_initialize_result(reply)
    for instance in ("", "x" * 129, 7):
        reply["instance"] = instance
        assert _violation(schema.validate_initialize_result, reply).path == "instance"
    reply = _example("initialize.result")
    for digest in ("sha256:" + "A" * 64, "sha256:" + "a" * 63, "md5:" + "a" * 64):
        reply["schema"] = digest
        assert _violation(schema.validate_initialize_result, reply).path == "schema"
    reply = _example("initialize.result")
    for name in ("Box", "-box", "", "box plugin"):
        reply["plugin"]["name"] = name
        assert _violation(schema.validate_initialize_result, reply).path == "plugin.name"
    reply = _example("initialize.result")
    reply["seams"]["link"]["slots"] = "shared"
    error = _violation(schema.validate_initialize_result, reply)
    assert error.path == "seams.link.slots" and error.keyword == "enum"
    reply = _example("initialize.result")
    reply["seams"]["boat"] = {}
    error = _violation(schema.validate_initialize_result, reply)
    assert error.path == "seams" and "'boat'" in error.reason


def test_results_are_strict():
    steps = _example("link.checkSteps.result")
    steps[1]["ok"] = "maybe"
    assert _violation(schema.validate_result, "link.checkSteps", steps).path == "[1].ok"
    _violation(schema.validate_result, "host.release", {})
    _violation(schema.validate_result, "link.exec", {"exitCode": 0, "stdout": "", "stderr": ""})
    _violation(schema.validate_result, "channel.readStates", {"writer": _example("channel.readStates.result")})
    abort = _example("channel.abort.result")
    abort["before"] = "blocked"
    _violation(schema.validate_result, "channel.abort", abort)
    send = _example("channel.send.result")
    send["ack"] = "yes"
    _violation(schema.validate_result, "channel.send", send)
    start = _example("job.start.result")
    del start["view"]["env"]
    assert _violation(schema.validate_result, "job.start", start).path == "view"


def test_push_needs_a_full_sha():
    params = _example("link.push.params")
    params["rev"] = "4f1c2a7"
    assert _violation(schema.validate_params, "link.push", params).path == "rev"
    params["rev"] = "a" * 64
    schema.validate_params("link.push", params)


def test_notifications():
    _violation(schema.validate_notification, "watch/settled", {"watchId": "w-1"})
    _violation(schema.validate_notification, "watch/restarted", {"watchId": "w-1", "incarnation": 2, "x": 1})
    _violation(schema.validate_notification, "$/cancel", {"id": 1, "watchId": "w-1"})


# -- the cost of importing ---------------------------------------------------------


def _fresh_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_importing_mu_schema_or_declaration_does_not_import_jsonschema():
    code = (
        "import sys, mu.schema as s, mu.declaration\n"
        "s.schema_digest(); s.METHODS; s.EFFECT_METHODS\n"
        "before = 'jsonschema' in sys.modules\n"
        "s.validate_definition('errorData', {'kind': 'permanent'})\n"
        "valid = 'jsonschema' in sys.modules\n"
        "assert s.result_problem('job.status', {'state': 'nope'})\n"
        "print(before, valid, 'jsonschema' in sys.modules)\n"
    )
    # A value that conforms is decided without jsonschema (mu.protocol.conforms);
    # the last value shows the check can see jsonschema once a failure loads it.
    assert _fresh_python(code) == "False False True"
