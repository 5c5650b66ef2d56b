"""mu.protocol.conforms against jsonschema: wherever it is sure, it answers
as jsonschema's Draft 2020-12 validator does, for every definition of the
shipped schema; and it is sure of the replies a read gets, so a read does
not import jsonschema.  No plugin is run: values are checked as they come
off the wire (decoded JSON)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from typing import Any, List

import pytest
from conftest import ROOT

from mu import schema
from mu.protocol import conforms

DEFS = schema._schema()["$defs"]


def jsonschema_says(name: str, value: Any) -> bool:
    return schema._validator(name).is_valid(value)  # mu.schema's own jsonschema validator of the definition


def _schema_nodes(node: Any = None) -> List[dict]:
    """Every object of the shipped definitions, at any depth."""
    found = []
    stack = [DEFS if node is None else node]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _vocabulary() -> List[str]:
    keys = set()
    for node in _schema_nodes():
        if isinstance(node.get("properties"), dict):
            keys.update(node["properties"])
    return sorted(keys)


KEYS = _vocabulary()
SCALARS = [None, True, False, 0, 1, -1, 3, 1.0, 2.5, -0.5, "", "a", "ws/a", "a/b/c", "running", "ended", "lost",
           "unknown", "idle", "busy", "blocked", "bound", "detached", "exact", "send", "x" * 300]


def random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth >= 3 or roll < 0.5:
        return rng.choice(SCALARS)
    if roll < 0.6:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    keys = rng.sample(KEYS, rng.randrange(0, 6)) + (["ws/a"] if rng.random() < 0.1 else [])
    return {key: random_value(rng, depth + 1) for key in keys}


# What reads get back, well formed: conforms must be sure of each.
READ_REPLIES = [
    ("job.status.result", {"state": "running"}),
    ("job.status.result", {"state": "ended", "exit": 0}),
    ("job.status.result", {"state": "ended", "exit": None}),
    ("job.status.result", {"state": "lost", "reason": "gone"}),
    ("job.status.result", {"state": "unknown", "reason": "not asked"}),
    ("channel.readStates.result", {"ws/a": {"state": "idle", "since": 1700000000000, "runs": 1, "incarnation": 1}}),
    ("channel.readStates.result", {"ws/a": {"state": "blocked", "since": 0, "runs": 0, "incarnation": 2,
                                            "reason": "r", "pending": "p"}}),
    ("channel.lastRun.result", None),
    ("channel.lastRun.result", {"status": "idle", "settled": True, "since": 1700000000000, "runs": 1,
                                "incarnation": 1, "lastText": "done"}),
]


@pytest.mark.parametrize("name,value", READ_REPLIES)
def test_a_reads_well_formed_replies_are_decided_without_jsonschema(name, value):
    assert jsonschema_says(name, value)
    assert conforms.verdict(DEFS, name, value) is True


def test_wherever_it_is_sure_it_answers_as_jsonschema():
    rng = random.Random(17)
    names = sorted(DEFS)
    samples = [random_value(rng) for _ in range(150)] + [value for _, value in READ_REPLIES]
    # near misses of the read replies: each key dropped, each value swapped
    for _, value in READ_REPLIES:
        if isinstance(value, dict):
            for key in value:
                samples.append({k: v for k, v in value.items() if k != key})
                samples += [dict(value, **{key: other}) for other in (True, 1.0, None, "x", -1)]
    sure = 0
    for name in names:
        for value in samples:
            said = conforms.verdict(DEFS, name, value)
            if said is not None:
                sure += 1
                assert said == jsonschema_says(name, value), (name, json.dumps(value)[:300])
    assert sure > len(names) * len(samples) // 2  # it is sure of most: the check above checked something


def test_a_read_of_a_well_formed_reply_imports_no_jsonschema():
    code = ("import sys; from mu import schema\n"
            "assert schema.result_problem('job.status', {'state': 'running'}) == ''\n"
            "assert schema.result_problem('job.status', {'state': 'ended'}) != ''\n"  # jsonschema says why
            "print('jsonschema' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT),
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "True\n"  # the failure needed jsonschema's words; the success did not
    code = ("import sys; from mu import schema\n"
            "assert schema.result_problem('job.status', {'state': 'running'}) == ''\n"
            "print('jsonschema' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT),
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert out.stdout == "False\n", out.stderr


PATTERN_TEXTS = ["", "a", "a/b", "a/b\n", "a/\n", "/b", "a/", "a//b", "a/b/c", "\n/b", "ws/a", "é/ü", "a/b\n\n",
                 "sha256:" + "a" * 64, "sha256:" + "a" * 64 + "\n", "sha256:" + "A" * 64, "sha256:" + "a" * 63,
                 "sha256:" + "a" * 65, "x" + "sha256:" + "a" * 64, "mu", "mu-1_x", "Mu", "-mu", "mu\n", "mu\n\n",
                 "m u", "0" * 40, "0" * 40 + "\n", "0" * 64, "0" * 63, "f" * 41, "0" * 40 + "\n\n", "g" * 40]


@pytest.mark.parametrize("pattern", sorted(conforms._BY_HAND))
def test_the_patterns_decided_by_hand_match_as_re_search_does(pattern):
    import re

    rng = random.Random(pattern)
    texts = PATTERN_TEXTS + ["".join(rng.choice("a0f/:\n-_sha256") for _ in range(rng.randrange(75)))
                             for _ in range(3000)]
    for text in texts:
        assert conforms._searcher(pattern)(text) == (re.search(pattern, text) is not None), repr(text)


def test_the_shipped_schema_has_no_pattern_the_hand_does_not_decide():
    found = set()
    for node in _schema_nodes():
        if isinstance(node.get("pattern"), str):
            found.add(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            found.update(node["patternProperties"])
    assert found <= set(conforms._BY_HAND)  # a new pattern still works (compiled), but costs a read `re`
