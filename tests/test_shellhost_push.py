"""link.push's repository check on a host reached by a command (ssh, podman,
kubectl): the check always answers a line, so a run that ended well and
printed nothing lost its output on the way, and is asked again.

The connection here is a stand-in that answers as a host would, and drops
the answers the test says; what it stands in for is a transport, which
the ssh, podman and kubernetes tests run for real.
"""

from __future__ import annotations

import time

import pytest

from mu import sdk
from mu.plugins.shellhost import remote
from mu.plugins.shellhost.link import ENSURE_TRIES, LinkSeam

REV = "a" * 40


class Connection:
    """Answers `remote.ENSURE_REPO` with the lines it is given, one run each."""

    dest = "box"

    def __init__(self, answers):
        self.answers = list(answers)
        self.runs = 0

    def op(self, program, args, end, cancel=None, data=b"", acts=False, hold=False):
        assert program == remote.ENSURE_REPO and acts
        self.runs += 1
        return self.answers.pop(0) if self.answers else []


class Plugin(LinkSeam):
    def __init__(self, connection):
        self.connection = connection

    def _connection(self, call, end):
        return self.connection


def push(tmp_path, connection):
    params = {"localRepo": str(tmp_path), "remoteRepo": "repo", "rev": REV, "timeoutMs": 5000}
    return Plugin(connection).push(params, None)


def test_a_check_whose_answer_was_lost_is_asked_again(tmp_path):
    connection = Connection([[], [""], ["held"]])
    assert push(tmp_path, connection)["exitCode"] == 0 and connection.runs == 3


def test_a_check_that_never_answers_is_an_unknown_outcome_that_says_so(tmp_path):
    connection = Connection([])
    began = time.monotonic()
    with pytest.raises(sdk.UnknownOutcome, match="push to box: the host gave no answer to the check of repository repo"):
        push(tmp_path, connection)
    assert connection.runs == ENSURE_TRIES and time.monotonic() - began < 2.0


def test_an_answer_the_first_time_is_asked_once(tmp_path):
    connection = Connection([["held"]])
    assert push(tmp_path, connection)["exitCode"] == 0 and connection.runs == 1
    with pytest.raises(sdk.Permanent, match="push to box: cannot make /x"):
        push(tmp_path, Connection([["fail cannot make /x"]]))
