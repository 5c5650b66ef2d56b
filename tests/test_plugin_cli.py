"""`mu plugin add/list/show/call/rm` through bin/mu, a real process each."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import MU, ROOT, fake_as, received, run_mu

HOSTILE_DEEP = ROOT / "tests" / "hostile" / "mu-plugin-deep-reply"


def db_file(state):
    return state / "mu.db"


def plugin_rows(state):
    path = db_file(state)
    if not path.exists():
        return []
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT name, argv FROM plugins").fetchall()


def test_add_list_show_call_rm(fake, isolated):
    added = run_mu("plugin", "add", "fake", "--", str(fake))
    assert added.returncode == 0, added.stderr
    assert "registered plugin fake" in added.stdout
    listed = run_mu("plugin", "list", "--json")
    doc = json.loads(listed.stdout)
    assert [p["name"] for p in doc["plugins"]] == ["fake"]
    assert doc["plugins"][0]["argv"] == [str(fake)]
    shown = json.loads(run_mu("plugin", "show", "fake", "--json").stdout)
    assert shown["seams"]["link"]["maxScriptBytes"] == 131072
    assert "seam link" in run_mu("plugin", "show", "fake").stdout
    called = run_mu("plugin", "call", "fake", "link.checkSteps", '{"phase": "reach"}')
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout) == [{"step": "fake", "ok": True, "detail": "fine"}]
    removed = run_mu("plugin", "rm", "fake")
    assert removed.returncode == 0
    assert plugin_rows(isolated) == []


def test_list_and_show_json_print_only_json(fake):
    run_mu("plugin", "add", "fake", "--", str(fake))
    for args in (("plugin", "list", "--json"), ("plugin", "show", "fake", "--json")):
        out = run_mu(*args)
        json.loads(out.stdout)
        assert out.stderr == ""


def test_call_fills_target_and_deadline(fake, tmp_path):
    log = tmp_path / "fake.log"
    run_mu("plugin", "add", "fake", "--", str(fake))
    out = run_mu("plugin", "call", "fake", "fake.echo", '{"a": 1}', "--host", "box", env={"FAKE_LOG": str(log)})
    assert out.returncode == 0, out.stderr
    echoed = json.loads(out.stdout)
    assert echoed["a"] == 1 and echoed["target"] == {"host": {"name": "box"}}
    assert isinstance(echoed["deadline"], int)
    bare = json.loads(run_mu("plugin", "call", "fake", "fake.echo").stdout)
    assert bare["target"] == {"host": {"name": "default"}}
    from mu.schema import validate_definition

    validate_definition("target", bare["target"])


@pytest.mark.parametrize(
    "method",
    ["host.acquire", "host.release", "job.start", "job.stop", "channel.send", "channel.answer", "link.exec", "shutdown"],
)
def test_call_refuses_effects_and_acts(fake, tmp_path, method):
    log = tmp_path / "fake.log"
    run_mu("plugin", "add", "fake", "--", str(fake))
    out = run_mu("plugin", "call", "fake", method, "{}", env={"FAKE_LOG": str(log)})
    assert out.returncode == 2
    assert out.stderr.startswith("mu: ")
    assert not log.exists()  # refused before the plugin was started


@pytest.mark.parametrize("params", ["not json", "[1, 2]", '"text"'])
def test_call_refuses_bad_params(fake, params):
    run_mu("plugin", "add", "fake", "--", str(fake))
    out = run_mu("plugin", "call", "fake", "fake.echo", params)
    assert out.returncode == 2 and "params-json" in out.stderr


@pytest.mark.parametrize("depth", [101, 1000, 50000])  # 50000: inside one argument's 128 KiB
def test_call_refuses_params_nested_too_deep(fake, depth):
    run_mu("plugin", "add", "fake", "--", str(fake))
    out = run_mu("plugin", "call", "fake", "fake.echo", '{"a":' + "[" * (depth - 1) + "]" * (depth - 1) + "}")
    assert (out.returncode, out.stderr.strip()) == (2, "mu: <params-json> is nested deeper than 100 levels")


def test_a_reply_nested_deep_is_the_plugins_protocol_error(tmp_path):
    deep = str(HOSTILE_DEEP)
    run_mu("plugin", "add", "deep-reply", "--", deep)
    for depth in (150, 500, 1000, 100000):
        out = run_mu("plugin", "call", "deep-reply", "link.checkSteps",
                     env={"HOSTILE_DEPTH": str(depth), "HOSTILE_ROOT": str(tmp_path), "MU_TRACE": str(tmp_path / "t")})
        assert out.returncode == 5, out.stderr
        assert out.stderr.strip() == "mu: plugin deep-reply broke the protocol: line is nested deeper than 100 levels"


@pytest.mark.parametrize(
    "knob, code, words",
    [
        ("error:permanent", 5, "(permanent)"),
        ("error:human", 5, "call the operator"),
        ("error:unknown-outcome", 5, "(unknown-outcome)"),
        ("error:retryable", 5, "tried 4 times"),
    ],
)
def test_call_error_kinds_map_to_exit_codes(fake, knob, code, words):
    run_mu("plugin", "add", "fake", "--", str(fake))
    out = run_mu("plugin", "call", "fake", "fake.echo", "{}", env={"FAKE_ON_FAKE_ECHO": knob})
    assert out.returncode == code, out.stderr
    assert words in out.stderr
    assert out.stderr.startswith("mu: ")


def test_call_of_an_unknown_plugin(isolated):
    out = run_mu("plugin", "call", "nope", "link.checkSteps")
    assert out.returncode == 2 and "no plugin named 'nope'" in out.stderr


def test_call_result_that_breaks_the_schema_exits_5(fake):
    run_mu("plugin", "add", "fake", "--", str(fake))
    # fake.echo is not a protocol method: anything goes; link.checkSteps is
    out = run_mu("plugin", "call", "fake", "link.checkSteps", "{}", env={"FAKE_ON_LINK_CHECKSTEPS": "error:permanent"})
    assert out.returncode == 5


@pytest.mark.parametrize("name", ["Fake", "_x", "a b", "", "x/y", "é", "-x"])
def test_add_refuses_bad_names(plugin_dir, name, isolated):
    out = run_mu("plugin", "add", name, "--", str(plugin_dir / f"mu-plugin-{name}"))
    assert out.returncode == 2
    # "-x" reads as an option, so it is an unknown option rather than a bad name
    assert ("unknown option -x" if name.startswith("-") else "name") in out.stderr
    assert plugin_rows(isolated) == []


def test_add_again_with_the_same_argv_records_the_new_declaration(fake):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    seams = json.loads(run_mu("plugin", "show", "fake", "--json").stdout)["seams"]
    seams["link"]["maxScriptBytes"] = 4096
    env = {"FAKE_SEAMS": json.dumps(seams)}
    # the changed declaration is refused until it is added again
    refused = run_mu("plugin", "call", "fake", "link.checkSteps", env=env)
    assert refused.returncode == 4 and "other seams" in refused.stderr
    assert run_mu("plugin", "add", "fake", "--", str(fake), env=env).returncode == 0
    shown = json.loads(run_mu("plugin", "show", "fake", "--json").stdout)
    assert shown["seams"]["link"]["maxScriptBytes"] == 4096
    assert run_mu("plugin", "call", "fake", "link.checkSteps", env=env).returncode == 0


def test_add_refuses_another_argv_for_a_registered_name(fake, tmp_path, isolated):
    log = tmp_path / "fake.log"
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    out = run_mu("plugin", "add", "fake", "--", str(fake), "--extra", env={"FAKE_LOG": str(log)})
    assert out.returncode == 2 and "another argv" in out.stderr and "plugin rm" in out.stderr
    assert not log.exists()
    assert plugin_rows(isolated) == [("fake", json.dumps([str(fake)]))]


def channel_seams(name):
    return json.dumps(
        {
            "link": {"fetch": True, "push": False, "slots": "self", "remoteOnTimeout": "stopped",
                     "quiescence": "provable", "maxScriptBytes": 131072, "checks": []},
            "channel": {"name": name, "caps": {"fence": "none", "receipt": "exact", "dedupe": "exact", "steer": "none",
                                               "interrupt": "none", "fresh": "none", "answer": False,
                                               "command": False, "watch": "stream", "settleText": "full"}},
        }
    )


def test_add_refuses_a_channel_name_another_plugin_holds(plugin_dir, isolated):
    a, b = fake_as(plugin_dir, "a"), fake_as(plugin_dir, "b")
    first = run_mu("plugin", "add", "a", "--", str(a), env={"FAKE_SEAMS": channel_seams("talk")})
    assert first.returncode == 0, first.stderr
    out = run_mu("plugin", "add", "b", "--", str(b), env={"FAKE_SEAMS": channel_seams("talk")})
    assert out.returncode == 2 and "channel 'talk' is held by plugin 'a'" in out.stderr
    assert [r[0] for r in plugin_rows(isolated)] == ["a"]


@pytest.mark.parametrize(
    "table, row, remedy",
    [
        ("host_profiles", "INSERT INTO host_profiles (name, plugin, added_at) VALUES ('box', 'fake', 0)",
         "(`mu host rm box` forgets it)"),
        ("hosts", "INSERT INTO hosts (name, plugin, instance, key, state, acquired_at, changed_at)"
                  " VALUES ('h1', 'fake', 'i', 'k', 'ready', 0, 0)", "(`mu host release h1` then `mu host rm h1`)"),
        ("jobs", "INSERT INTO jobs (token, plugin, instance) VALUES ('t1', 'fake', 'i')", "(stop the job first)"),
        ("effects", "INSERT INTO effects (id, key, method, params, params_sha256, plugin, instance, subject, writer_pid,"
                    " writer_started, plugin_pgid, plugin_started, written_at)"
                    " VALUES ('e1', 'k1', 'host.acquire', '{}', 'x', 'fake', 'i', 'host:h', 1, 0, 1, 0, 0)",
         "(`mu host status` on it says what resolves it)"),
    ],
)
def test_rm_is_refused_while_a_record_names_the_plugin(fake, isolated, table, row, remedy):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    with sqlite3.connect(db_file(isolated)) as conn:
        conn.execute(row)
    out = run_mu("plugin", "rm", "fake")
    assert out.returncode == 2 and "in use" in out.stderr
    assert out.stderr.splitlines()[-1] == remedy  # a verb that helps, never "remove the effect first"
    assert plugin_rows(isolated)


def test_rm_of_an_unknown_plugin(isolated):
    out = run_mu("plugin", "rm", "ghost")
    assert out.returncode == 2 and "no plugin named 'ghost'" in out.stderr


@pytest.mark.parametrize(
    "mode, words",
    [
        ("garbage", "not JSON"),
        ("error", "answered the handshake with an error"),
        ("die", "exited with status 3"),
        ("wrong-digest", "digest"),
        ("wrong-name", "name"),
        ("wrong-protocol", "protocol"),
        ("no-seams", "seam"),
        ("unknown-field", "extra"),
        ("bad-utf8", "UTF-8"),
        ("huge", "1 MiB"),
        ("request", "request"),
        ("reply-to-nothing", "not pending"),
        ("notify-bad", "notification"),
        ("envelope-extra", "unknown field"),
        ("instance:", "instance"),
        ("instance:" + "i" * 129, "instance"),
    ],
)
def test_add_refuses_a_bad_handshake(fake, isolated, mode, words):
    started = time.monotonic()
    out = run_mu("plugin", "add", "fake", "--", str(fake), env={"FAKE_HANDSHAKE": mode})
    assert out.returncode == 4, (out.stdout, out.stderr)
    assert words in out.stderr
    assert out.stderr.startswith("mu: ") and len(out.stderr.splitlines()) <= 2
    assert time.monotonic() - started < 10 + 5
    assert plugin_rows(isolated) == []  # nothing is recorded from a refused add


def test_add_refuses_a_silent_plugin_within_its_deadline(fake, isolated):
    started = time.monotonic()
    out = run_mu("plugin", "add", "fake", "--", str(fake), env={"FAKE_HANDSHAKE": "silent"}, timeout=40)
    took = time.monotonic() - started
    assert out.returncode == 4 and "did not answer the handshake" in out.stderr
    assert 10 <= took < 10 + 5 + 2  # the read's 10 s, then at most one grace
    assert plugin_rows(isolated) == []


def test_handshake_reply_equal_to_the_record_skips_validation(fake, tmp_path):
    """The fast path: a call imports no jsonschema when the reply is known."""
    run_mu("plugin", "add", "fake", "--", str(fake))
    probe = (
        "import sys; sys.path.insert(0, %r)\n"
        "from mu.store import plugins\n"
        "from mu.runtime.client import PluginClient\n"
        "r = plugins.get('fake')\n"
        "c = PluginClient('fake', r.argv, recorded=r.handshake)\n"
        "c.started(); c.stop()\n"
        "print('jsonschema' in sys.modules)\n"
    ) % str(MU.parent.parent)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=dict(os.environ))
    assert out.stdout.strip() == "False", out.stderr


def test_two_adds_at_once_both_finish(fake, isolated):
    procs = [
        subprocess.Popen([sys.executable, str(MU), "plugin", "add", "fake", "--", str(fake)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(p.wait(timeout=30), p.communicate()) for p in procs]
    assert [code for code, _ in results] == [0, 0], results
    assert plugin_rows(isolated) == [("fake", json.dumps([str(fake)]))]


def test_two_adds_of_different_plugins_with_one_channel(plugin_dir, isolated):
    env = dict(os.environ, FAKE_SEAMS=channel_seams("talk"))
    procs = [
        subprocess.Popen([sys.executable, str(MU), "plugin", "add", name, "--", str(fake_as(plugin_dir, name))],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for name in ("a", "b")
    ]
    codes = sorted(p.wait(timeout=30) for p in procs)
    for p in procs:
        p.communicate()
    assert codes == [0, 2]
    assert len(plugin_rows(isolated)) == 1


def test_usage_errors_exit_2(isolated):
    for args in (("plugin",), ("plugin", "add"), ("plugin", "frob"), ("frob",), ("plugin", "list", "--bogus")):
        out = run_mu(*args)
        assert out.returncode == 2, args
        assert out.stderr.startswith("mu: ") or out.stderr.startswith("Usage:")


def test_help_and_version(isolated):
    assert "mu plugin add" in run_mu("help", "plugin").stdout
    assert "mu plugin add" in run_mu("plugin", "--help").stdout
    assert run_mu("plugin", "add", "--help").returncode == 0
    assert "mu log" in run_mu("log", "-h").stdout
    assert run_mu("--version").stdout.startswith("mu ")
    assert "plugin" in run_mu("help").stdout


def test_state_dir_only_is_touched(fake, isolated, tmp_path):
    run_mu("plugin", "add", "fake", "--", str(fake))
    assert (isolated / "mu.db").exists()
    home = tmp_path / "home"
    assert not any(home.rglob("*.db"))


def test_received_frames_are_compact_json_lines(fake, tmp_path):
    log = tmp_path / "fake.log"
    run_mu("plugin", "add", "fake", "--", str(fake), env={"FAKE_LOG": str(log)})
    init = received(log)[0]
    assert init == {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocol": {"min": 1, "max": 1}, "mu": init["params"]["mu"]}}


def test_a_call_that_hangs_is_cancelled_and_stopped_within_its_deadline(fake, tmp_path):
    log = tmp_path / "fake.log"
    run_mu("plugin", "add", "fake", "--", str(fake))
    started = time.monotonic()
    out = run_mu("plugin", "call", "fake", "link.checkSteps", "{}",
                 env={"FAKE_ON_LINK_CHECKSTEPS": "hang", "FAKE_IGNORE_EOF": "1", "FAKE_LOG": str(log)}, timeout=40)
    took = time.monotonic() - started
    assert out.returncode == 5 and "no answer to link.checkSteps" in out.stderr
    assert 10 <= took < 10 + 5 + 2  # reads take 10 s; then one grace at most
    assert '"$/cancel"' in log.read_text()


# -- params the wire cannot carry (protocol "Transport": JSON, UTF-8) ---------------


def journal_texts(*args):
    out = run_mu("log", "--json", *args)
    assert out.returncode == 0, out.stderr
    return [e["text"] for e in json.loads(out.stdout)["entries"]]


def started_plugins():
    return [t for t in journal_texts() if t.startswith("start argv=")]


@pytest.mark.parametrize(
    "params, words",
    [
        ('{"a": NaN}', "NaN"),
        ('{"a": Infinity}', "Infinity"),
        ('{"a": [-Infinity]}', "-Infinity"),
        ('{"a": 1e999}', "1e999"),
        ('{"a": -1e999}', "-1e999"),
        ('{"a": "\\ud800"}', "surrogate"),
        ('{"\\udfff": 1}', "surrogate"),
        ('{"a": {"b": ["x", "y\\udc00z"]}}', "surrogate"),
    ],
)
def test_call_refuses_params_the_wire_cannot_carry(fake, tmp_path, params, words):
    log = tmp_path / "fake.log"
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    before = started_plugins()
    out = run_mu("plugin", "call", "fake", "fake.echo", params, env={"FAKE_LOG": str(log)})
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("mu: ") and len(out.stderr.splitlines()) == 1
    assert words in out.stderr and "Traceback" not in out.stderr
    assert not log.exists()  # the plugin never ran
    assert started_plugins() == before


def test_call_refuses_command_line_text_that_is_not_utf8(fake, tmp_path):
    log = tmp_path / "fake.log"
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    not_utf8 = os.fsdecode(b"box\xff")  # the byte reaches mu as a lone surrogate
    for args in (("fake.echo", "--host", not_utf8), (os.fsdecode(b"fake.\xff"),), ("fake.echo", '{"a": "%s"}' % not_utf8)):
        out = run_mu("plugin", "call", "fake", *args, env={"FAKE_LOG": str(log)})
        assert out.returncode == 2, (args, out.stderr)
        assert "not valid UTF-8" in out.stderr and len(out.stderr.splitlines()) == 1
    assert not log.exists()


def test_call_still_sends_finite_numbers_and_any_unicode(fake):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    out = run_mu("plugin", "call", "fake", "fake.echo", '{"a": 1e308, "b": -0.5, "c": "\\ud83d\\ude00 é"}')
    assert out.returncode == 0, out.stderr
    echoed = json.loads(out.stdout)
    assert echoed["a"] == 1e308 and echoed["b"] == -0.5 and echoed["c"] == "\U0001f600 é"


# -- --host: a host mu knows goes as recorded ------------------------------------------


PROVIDER_SEAMS = {
    "link": {"fetch": True, "push": False, "slots": "self", "remoteOnTimeout": "stopped",
             "quiescence": "provable", "maxScriptBytes": 4096, "checks": []},
    "job": {"kind": "fake", "view": "bound", "handle": "file", "start": {"lookup": True, "fenceKey": True},
            "checks": []},
    "host": {"acquire": {"lookup": True, "fenceKey": True}},
}


@pytest.fixture
def provider(fake, monkeypatch):
    """The fake as a provider, with one host `box` acquired (handle h-1)."""
    monkeypatch.setenv("FAKE_SEAMS", json.dumps(PROVIDER_SEAMS))
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    acquired = run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": '{"handle": "h-1"}'})
    assert acquired.returncode == 0, acquired.stderr
    return fake


def test_call_with_an_acquired_host_sends_its_handle_and_instance(provider):
    out = run_mu("plugin", "call", "fake", "fake.echo", "--host", "box")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["target"] == {"host": {"name": "box", "instance": "fake-1", "handle": "h-1"}}
    # a name mu has no record of is sent bare, for poking at anything
    bare = run_mu("plugin", "call", "fake", "fake.echo", "--host", "elsewhere")
    assert json.loads(bare.stdout)["target"] == {"host": {"name": "elsewhere"}}
    # a target in <params-json> is left as it is
    given = run_mu("plugin", "call", "fake", "fake.echo", '{"target": {"host": {"name": "x"}}}', "--host", "box")
    assert json.loads(given.stdout)["target"] == {"host": {"name": "x"}}


def test_call_with_an_acquired_host_under_another_instance_sends_nothing(provider, tmp_path):
    log = tmp_path / "fake.log"
    out = run_mu("plugin", "call", "fake", "fake.echo", "--host", "box",
                 env={"FAKE_INSTANCE": "other", "FAKE_LOG": str(log)})
    assert out.returncode == 2 and "stop-changed" in out.stderr
    assert [m["method"] for m in received(log) if "method" in m] in (["initialize"], ["initialize", "shutdown"])


def test_call_with_a_host_of_another_plugin_is_refused_before_it_starts(provider, plugin_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("FAKE_SEAMS")
    other = fake_as(plugin_dir, "other")
    assert run_mu("plugin", "add", "other", "--", str(other)).returncode == 0
    log = tmp_path / "fake.log"
    out = run_mu("plugin", "call", "other", "fake.echo", "--host", "box", env={"FAKE_LOG": str(log)})
    assert out.returncode == 2 and "plugin 'fake'" in out.stderr
    assert not log.exists()


def test_call_with_a_profile_sends_its_name(fake):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    assert run_mu("host", "add", "dev", "--plugin", "fake").returncode == 0
    out = run_mu("plugin", "call", "fake", "fake.echo", "--host", "dev")
    assert json.loads(out.stdout)["target"] == {"host": {"name": "dev"}}


def test_the_page_gives_one_default_for_host():
    page = (MU.parent.parent / "man" / "mu-plugin.1").read_text()
    assert "empty string" not in page
    assert "Without it the name is\n.BR default" in page
    assert "Without\n.BR \\-\\-host ,\n.I <h>\nis\n.BR default" in page
    from mu.cli.plugin import DEFAULT_HOST

    assert DEFAULT_HOST == "default"


# -- test: options before --, the plugin's argv after it ------------------------------


def test_test_usage_puts_its_options_before_the_double_dash(isolated):
    usage = run_mu("help", "plugin").stdout
    line = next(x for x in usage.splitlines() if x.strip().startswith("mu plugin test"))
    words = line.split()
    assert words.index("--") > max(words.index(w) for w in ("[--json]", "[--only", "[--param"))


def test_test_honours_only_before_the_double_dash(fake):
    out = run_mu("plugin", "test", "--only", "cancel", "--", str(fake))
    checks = [line.split()[1] for line in out.stdout.splitlines()[1:-1]]
    assert "cancel" in checks and "link.exec" not in checks, out.stdout


def test_test_hands_everything_after_the_double_dash_to_the_plugin(plugin_dir):
    # a plugin that fails the trust checks at once: only the argv matters here
    missing = plugin_dir / "mu-plugin-gone"
    out = run_mu("plugin", "test", "--", str(missing), "--only", "cancel", "--json")
    assert out.returncode == 4
    assert out.stdout.splitlines()[0] == f"mu plugin test gone: {missing} --only cancel --json"
    # the same options before -- are mu's: one JSON document
    out = run_mu("plugin", "test", "--json", "--only", "cancel", "--", str(missing))
    assert out.returncode == 4
    assert json.loads(out.stdout)


@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_a_closed_stream_is_as_if_sent_to_dev_null(fake, closed):
    """`mu plugin add ... >&-`: the verb does its work and exits with its own
    code; nothing of mu's lands as a traceback on the other stream."""
    shell = f'"$0" "$1" plugin add fake -- "$2" {">&-" if closed == "stdout" else "2>&-"}; echo "rc=$?" >&3'
    out = subprocess.run(["sh", "-c", f"exec 3>&1; {shell}", sys.executable, str(MU), str(fake)],
                         capture_output=True, text=True, timeout=60)
    assert "rc=0" in out.stdout, out
    assert "Traceback" not in out.stdout + out.stderr
    assert run_mu("plugin", "show", "fake").returncode == 0  # the work was done
    refused = subprocess.run(["sh", "-c", f'exec 3>&1; "$0" "$1" plugin rm nosuch {">&-" if closed == "stdout" else "2>&-"}; echo "rc=$?" >&3',
                              sys.executable, str(MU)], capture_output=True, text=True, timeout=60)
    assert "rc=2" in refused.stdout and "Traceback" not in refused.stdout + refused.stderr
