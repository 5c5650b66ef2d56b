"""The man pages agree with the code, and render cleanly.

What this keeps true (mu(1) and the usage of each verb):

- every verb group (a `mu/cli/*.py` whose docstring is a docopt usage) has
  a page, `mu.1` for the top level and `mu-<group>.1` for the others, whose
  SYNOPSIS holds the usage lines verbatim, once stripped of roff;
- every option of a usage has its entry in the page's OPTIONS, spelled as
  the docstring spells it, and OPTIONS documents no option the usage lacks;
- mu(1)'s EXIT STATUS lists every exit code mu has, and no page lists one
  that mu(1) does not;
- every JSON message in mu-plugin-protocol(7) is one the protocol allows,
  checked with mu's own envelope parser and schema validators;
- every `mu ...` command line in an example parses with its group's usage;
- groff renders every page with no warning, in 80 columns.

Only the rendering tests need groff (or man); without either they skip.
The roff reader here understands the small subset of man(7) the pages use
and refuses anything else, so a page cannot slip past a check by using a
construct the check would misread.
"""

from __future__ import annotations

import ast
import configparser
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
from typing import Dict, List, Optional, Tuple

import pytest
from conftest import run_mu
from docopt import DocoptExit, docopt

import mu
from mu import environment, errors, schema
from mu.cli import main as main_table
from mu.rpc import envelope, framing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAN = os.path.join(ROOT, "man")
CLI = os.path.join(ROOT, "mu", "cli")

#: the exit codes scripts depend on; mu(1) must list each one.
EXIT_CODES = {"0", "1", "2", "4", "5", "7"}

#: Sections every page has, in this order, with others between them.
REQUIRED_SECTIONS = ("NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "SEE ALSO")

#: What every page may say about help without the usage spelling it out.
HELP_OPTIONS = {"-h", "--help"}

RENDER_WIDTH = 80  # columns a rendered line may take
RENDER_TIMEOUT_S = 30


# -- the subset of roff the pages use -------------------------------------------------


class RoffError(ValueError):
    """A construct this reader does not understand."""


# Font macros: the alternating ones join their arguments with no space, the
# others with one.
_ALTERNATING = {"BR", "RB", "BI", "IB", "IR", "RI"}
_JOINING = {"B", "I", "SM", "SB"}

_SIMPLE_ESCAPES = {"-": "-", "e": "\\", "&": "", "%": "", " ": " ", "~": " ", "|": "", "^": "", "0": " "}
_GLYPHS = {
    "aq": "'",
    "dq": '"',
    "lq": "\u201c",
    "rq": "\u201d",
    "oq": "\u2018",
    "cq": "\u2019",
    "bu": "\u2022",
    "em": "\u2014",
    "en": "\u2013",
    "ti": "~",
    "ha": "^",
    "rs": "\\",
    "->": "\u2192",  # mu top's arrow before a notice's command
}


def unescape(text: str) -> str:
    """The characters roff prints for one line's text."""
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(text):
            raise RoffError(f"a line ends in a backslash: {text!r}")
        e = text[i + 1]
        if e == '"':  # a comment runs to the end of the line
            break
        if e == "f":  # a font change prints nothing
            if text.startswith("(", i + 2):
                i += 5
            elif text.startswith("[", i + 2):
                i = text.index("]", i) + 1
            else:
                i += 3
            continue
        if e == "(":
            out.append(_glyph(text[i + 2 : i + 4], text))
            i += 4
            continue
        if e == "[":
            end = text.index("]", i)
            out.append(_glyph(text[i + 2 : end], text))
            i = end + 1
            continue
        if e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
            i += 2
            continue
        raise RoffError(f"escape \\{e} is not one this reader knows: {text!r}")
    return "".join(out)


def _glyph(name: str, text: str) -> str:
    if name not in _GLYPHS:
        raise RoffError(f"glyph \\({name} is not one this reader knows: {text!r}")
    return _GLYPHS[name]


def split_args(rest: str) -> List[str]:
    """A macro line's arguments, still escaped: split at unescaped spaces,
    with double quotes grouping and `""` standing for one quote."""
    args: List[str] = []
    i, n = 0, len(rest)
    while True:
        while i < n and rest[i] == " ":
            i += 1
        if i >= n:
            return args
        buf: List[str] = []
        quoted = rest[i] == '"'
        if quoted:
            i += 1
        while i < n:
            c = rest[i]
            if c == "\\" and i + 1 < n:
                buf.append(rest[i : i + 2])
                i += 2
                continue
            if quoted and c == '"':
                if rest.startswith('""', i):
                    buf.append('"')
                    i += 2
                    continue
                i += 1
                break
            if not quoted and c == " ":
                break
            buf.append(c)
            i += 1
        args.append("".join(buf))


def macro(line: str) -> Tuple[str, List[str]]:
    """`.XX args` as ("XX", args)."""
    head, _, rest = line[1:].strip().partition(" ")
    return head, split_args(rest)


def text_of(line: str) -> str:
    """What one input line prints: a text line, or a font macro's words."""
    if not line.startswith((".", "'")):
        return unescape(line)
    name, args = macro(line)
    if name in _ALTERNATING:
        return "".join(unescape(a) for a in args)
    if name in _JOINING:
        return " ".join(unescape(a) for a in args)
    raise RoffError(f"{line!r} is not a font macro")


def is_comment(line: str) -> bool:
    return line.startswith('.\\"') or line.startswith("'\\\"")


class Page:
    """One man page's source, cut into sections."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.path = os.path.join(MAN, filename)
        with open(self.path, "rb") as f:
            self.raw = f.read()
        self.lines = [line for line in self.raw.decode("ascii").splitlines() if not is_comment(line)]
        self.sections: Dict[str, List[str]] = {}
        self.order: List[str] = []
        current: Optional[List[str]] = None
        for line in self.lines:
            if line.startswith(".SH"):
                _, args = macro(line)
                title = unescape(" ".join(args))
                if title in self.sections:
                    raise RoffError(f"{filename}: section {title} twice")
                self.order.append(title)
                current = self.sections[title] = []
            elif current is not None:
                current.append(line)

    def section(self, title: str) -> List[str]:
        assert title in self.sections, f"{self.filename} has no {title} section"
        return self.sections[title]

    def section_text(self, title: str) -> str:
        """A section's words, macros and escapes stripped."""
        words = []
        for line in self.section(title):
            if line.startswith(".") and macro(line)[0] not in _ALTERNATING | _JOINING:
                continue
            words.append(text_of(line))
        return " ".join(words)


def tags(lines: List[str]) -> List[str]:
    """The tag of every `.TP` paragraph among `lines`, as printed."""
    found = []
    for i, line in enumerate(lines):
        if line == ".TP" or line.startswith(".TP "):
            found.append(text_of(lines[i + 1]))
    return found


def synopsis_patterns(lines: List[str]) -> List[str]:
    """Each `.SY` ... `.YS` block of a SYNOPSIS, as the one line it prints:
    the command name, then every input line's words joined by one space
    (fill mode), font macros' arguments joined as roff joins them."""
    patterns: List[str] = []
    current: Optional[List[str]] = None
    for line in lines:
        if line.startswith(".SY"):
            if current is not None:
                raise RoffError(".SY inside .SY")
            current = [unescape(" ".join(macro(line)[1]))]
        elif line.startswith(".YS"):
            if current is None:
                raise RoffError(".YS without .SY")
            patterns.append(" ".join(current))
            current = None
        elif current is not None:
            if not line.strip():
                raise RoffError("a blank line inside .SY")
            current.append(text_of(line))
    if current is not None:
        raise RoffError(".SY without .YS")
    return patterns


def example_blocks(page: Page) -> List[List[str]]:
    """The printed lines of every `.EX` ... `.EE` block."""
    blocks: List[List[str]] = []
    current: Optional[List[str]] = None
    for line in page.lines:
        if line == ".EX":
            current = []
        elif line == ".EE":
            assert current is not None, f"{page.filename}: .EE without .EX"
            blocks.append(current)
            current = None
        elif current is not None:
            if line.startswith((".", "'")):
                raise RoffError(f"{page.filename}: a request inside .EX: {line!r}")
            current.append(unescape(line))
    assert current is None, f"{page.filename}: .EX without .EE"
    return blocks


def json_examples(page: Page) -> List[dict]:
    """Every JSON document shown in an example block.  A document starts on
    a line that begins with `{` and may run over several lines; one that
    never parses fails the test with its text."""
    found = []
    for block in example_blocks(page):
        pending: Optional[List[str]] = None
        for line in block:
            if pending is None:
                if not line.startswith("{"):
                    continue
                pending = [line]
            else:
                pending.append(line)
            try:
                value = json.loads("\n".join(pending))
            except ValueError:
                continue
            found.append(value)
            pending = None
        assert pending is None, f"{page.filename}: an example is not JSON:\n" + "\n".join(pending)
    return found


def command_examples(page: Page) -> List[List[str]]:
    """Every example line that runs mu, as its argv."""
    return [shlex.split(line) for block in example_blocks(page) for line in block if line.startswith("mu ")]


# -- the code's side ---------------------------------------------------------------


def docstring_of(path: str) -> Optional[str]:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    return ast.get_docstring(tree, clean=False)


def verb_groups() -> Dict[str, str]:
    """group name -> usage docstring, for every `mu/cli/*.py` whose
    docstring is a usage (`main` is the top level)."""
    groups = {}
    for filename in sorted(os.listdir(CLI)):
        if not filename.endswith(".py"):
            continue
        doc = docstring_of(os.path.join(CLI, filename))
        if doc and (doc.startswith("Usage:") or doc.startswith("\nUsage:")):
            groups[filename[: -len(".py")]] = doc
    return groups


GROUPS = verb_groups()
# mu's verbs, each to the group whose usage it is (`mu command` is in
# mu/cli/send.py's): the dispatch table itself
VERB_GROUP = {verb: module.rsplit(".", 1)[1] for verb, module in main_table.GROUPS.items()}


def page_of(group: str) -> str:
    return "mu.1" if group == "main" else f"mu-{group}.1"


def doc_section(doc: str, title: str) -> List[str]:
    """The lines of a docopt section (`Usage:`, `Options:`), up to a blank
    line, stripped."""
    lines = doc.strip("\n").splitlines()
    for i, line in enumerate(lines):
        if line.strip() == title:
            out = []
            for following in lines[i + 1 :]:
                if not following.strip():
                    break
                out.append(following.strip())
            return out
    return []


_OPTION = re.compile(r"(?<![\w<-])(--?[A-Za-z][\w-]*)")


def usage_options(doc: str) -> List[str]:
    """Every option the usage lines name, in order of first appearance."""
    seen: List[str] = []
    for line in doc_section(doc, "Usage:"):
        for option in _OPTION.findall(line):
            if option not in seen:
                seen.append(option)
    return seen


def option_specs(doc: str) -> Dict[str, str]:
    """option -> how the docstring spells it with its argument (`--host
    <h>`): from the Options section, else the bare option of the usage."""
    specs = {option: option for option in usage_options(doc)}
    for line in doc_section(doc, "Options:"):
        spec = re.split(r"\s{2,}", line, maxsplit=1)[0]
        specs[spec.split()[0]] = spec
    return specs


PAGES = sorted(f for f in os.listdir(MAN) if re.fullmatch(r"[a-z-]+\.[1-8]", f))


@pytest.fixture(scope="module")
def pages() -> Dict[str, Page]:
    return {f: Page(f) for f in PAGES}


# -- the pages and the usages ------------------------------------------------------


def test_the_groups_are_found():
    # A discovery that found nothing would make every test below vacuous.
    assert {"main", "plugin", "log"} <= set(GROUPS), sorted(GROUPS)
    assert {page_of(g) for g in GROUPS} | {"mu-plugin-protocol.7", "mu-plugin-ssh.1", "mu-plugin-podman.1",
                                                  "mu-plugin-kubernetes.1"} == set(PAGES)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_synopsis_is_the_usage(group, pages):
    usage = doc_section(GROUPS[group], "Usage:")
    assert usage, f"mu/cli/{group}.py has no usage lines"
    page = pages[page_of(group)]
    assert synopsis_patterns(page.section("SYNOPSIS")) == usage


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_every_option_has_its_entry(group, pages):
    doc = GROUPS[group]
    page = pages[page_of(group)]
    specs = option_specs(doc)
    if not specs:
        return
    entries = tags(page.section("OPTIONS"))
    documented = {spec for entry in entries for spec in entry.split(", ")}
    missing = [spec for spec in specs.values() if spec not in documented]
    assert not missing, f"{page.filename} OPTIONS lacks {missing} (it has {entries})"
    # and no entry for an option the usage does not have
    named = {m for entry in entries for m in _OPTION.findall(entry)}
    assert named - set(specs) - HELP_OPTIONS == set()


def test_main_lists_every_verb(pages):
    verbs = [line.split()[0] for line in doc_section(GROUPS["main"], "Verbs:")]
    assert "help" in verbs
    assert set(verbs) - {"help"} == set(VERB_GROUP)
    assert set(VERB_GROUP.values()) == set(GROUPS) - {"main"}
    described = set(tags(pages["mu.1"].section("DESCRIPTION")))
    assert set(verbs) <= described


@pytest.mark.parametrize("group", sorted(set(GROUPS) - {"main"}))
def test_main_page_points_to_each_group(group, pages):
    see_also = pages["mu.1"].section_text("SEE ALSO")
    assert f"mu-{group}(1)" in see_also


@pytest.mark.parametrize("filename", PAGES)
def test_examples_parse_with_the_usage(filename, pages):
    for argv in command_examples(pages[filename]):
        group = VERB_GROUP.get(argv[1], "main") if len(argv) > 1 else "main"
        try:
            args = docopt(GROUPS[group], argv[1:], default_help=False)
        except DocoptExit:
            pytest.fail(f"{filename}: the example `{shlex.join(argv)}` does not match mu/cli/{group}.py's usage")
        if args.get("<params-json>") is not None:
            assert isinstance(json.loads(args["<params-json>"]), dict)


# -- exit codes and environment ----------------------------------------------------


def exit_codes(page: Page) -> List[str]:
    return tags(page.section("EXIT STATUS"))


def code_exit_codes() -> Dict[str, int]:
    from mu.cli import main

    found = {name: value for name, value in vars(errors).items() if name.startswith("EXIT_")}
    found["EXIT_INTERNAL"] = main.EXIT_INTERNAL
    return found


def test_mu1_lists_every_exit_code(pages):
    listed = exit_codes(pages["mu.1"])
    assert EXIT_CODES <= set(listed)
    assert {str(v) for v in code_exit_codes().values()} == set(listed)
    assert len(listed) == len(set(listed))


def test_every_error_class_has_a_documented_code(pages):
    listed = set(exit_codes(pages["mu.1"]))
    classes = [errors.MuError]
    while classes:
        cls = classes.pop()
        assert str(cls.exit_code) in listed, cls.__name__
        classes.extend(cls.__subclasses__())


@pytest.mark.parametrize("filename", PAGES)
def test_page_exit_codes_are_mus(filename, pages):
    listed = exit_codes(pages[filename])
    assert listed, f"{filename} lists no exit code"
    assert set(listed) <= set(exit_codes(pages["mu.1"]))
    if filename.endswith(".1"):
        assert "0" in listed


@pytest.mark.parametrize("filename", ["mu.1", "mu-plugin-protocol.7"])
def test_local_only_variables_are_named(filename, pages):
    text = pages[filename].section_text("ENVIRONMENT")
    missing = sorted(v for v in environment.LOCAL_ONLY_VARIABLES if not re.search(rf"\b{v}\b", text))
    assert not missing, f"{filename} ENVIRONMENT does not name {missing}"


def test_mu_state_lists_every_notice_blocked_first(pages):
    # mu-state(1)'s notices are the kinds mu.agents.state makes, each a
    # tag of the DESCRIPTION, the blocked agent's first (it is shown
    # first); mu-top(1) says the same of its notices.
    with open(os.path.join(ROOT, "mu", "agents", "state.py"), encoding="utf-8") as f:
        made = set(re.findall(r'Notice\("([a-z-]+)"', f.read()))
    listed = tags(pages["mu-state.1"].section("DESCRIPTION"))
    assert made and made <= set(listed), f"mu-state.1 does not list {sorted(made - set(listed))}"
    assert listed[0] == "blocked"
    top = pages["mu-top.1"].section_text("DESCRIPTION")
    assert "shows as a notice, first among the notices" in top and "mu answer" in top


def test_effect_methods_agree(pages):
    # mu-plugin(1) lists what `plugin call` refuses; the protocol page marks
    # the effects; mu.schema is what the code refuses with.
    marked = {t.split()[0] for t in tags(pages["mu-plugin-protocol.7"].section("METHODS")) if "(effect)" in t}
    assert marked == set(schema.EFFECT_METHODS)
    text = pages["mu-plugin.1"].section_text("COMMANDS")
    effects = re.search(r"the effect methods (.*?), and the link's acting methods (.*?)\.(\s|$)", text)
    assert effects, "mu-plugin(1) no longer lists what `call` refuses"
    assert set(re.findall(r"[a-z]+\.[a-zA-Z]+", effects.group(1))) == set(schema.EFFECT_METHODS)
    assert set(re.findall(r"[a-z]+\.[a-zA-Z]+", effects.group(2))) == {"link.exec", "link.fetch", "link.push"}


def test_protocol_page_documents_every_method(pages):
    documented = [t.split()[0] for t in tags(pages["mu-plugin-protocol.7"].section("METHODS"))]
    assert documented == list(schema.METHODS)


# -- the shape of every page -------------------------------------------------------


@pytest.mark.parametrize("filename", PAGES)
def test_page_has_the_fixed_sections(filename, pages):
    page = pages[filename]
    positions = [page.order.index(s) for s in REQUIRED_SECTIONS if s in page.order]
    assert len(positions) == len(REQUIRED_SECTIONS), f"{filename} has {page.order}"
    assert positions == sorted(positions)
    assert page.order[0] == "NAME" and page.order[-1] == "SEE ALSO"
    if filename == "mu.1":
        assert {"OPTIONS", "ENVIRONMENT", "FILES"} <= set(page.order)


@pytest.mark.parametrize("filename", PAGES)
def test_title_and_name(filename, pages):
    page = pages[filename]
    name, section = filename.rsplit(".", 1)
    th = [line for line in page.lines if line.startswith(".TH")]
    assert len(th) == 1 and page.lines[0] == th[0]
    title, number, date, source, manual = (unescape(a) for a in macro(th[0])[1])
    assert (title, number, source, manual) == (name.upper(), section, f"mu {mu.__version__}", "mu manual")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date)
    assert re.fullmatch(rf"{re.escape(name)} - \S.*", page.section_text("NAME"))


@pytest.mark.parametrize("filename", PAGES)
def test_references_resolve(filename, pages):
    page = pages[filename]
    for line in page.lines:
        if line.startswith(".BR "):
            args = [unescape(a) for a in macro(line)[1]]
            if len(args) >= 2 and args[0].startswith("mu") and re.fullmatch(r"\(\d\)\S*", args[1]):
                target = f"{args[0]}.{args[1][1]}"
                assert target in PAGES, f"{filename} refers to {target}, which does not exist"


@pytest.mark.parametrize("filename", PAGES)
def test_code_words_use_minus_signs(filename, pages):
    # A plain `-` is a hyphen, which some devices print as U+2010: an option
    # or a command copied from the page would not work.  In the synopsis,
    # the option tags and the examples every minus is `\-`.
    page = pages[filename]
    lines = list(page.section("SYNOPSIS"))
    lines += _tag_lines(page.sections.get("OPTIONS", []))
    in_example = False
    for line in page.lines:
        if line == ".EX":
            in_example = True
        elif line == ".EE":
            in_example = False
        elif in_example:
            lines.append(line)
    for line in lines:
        assert "-" not in line.replace("\\-", "").replace("\\(->", ""), f"{filename}: bare hyphen in {line!r}"


def _tag_lines(lines: List[str]) -> List[str]:
    return [lines[i + 1] for i, line in enumerate(lines) if line == ".TP"]


def test_setup_installs_every_page():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    installed = []
    for key, value in config["options.data_files"].items():
        files = [v.strip() for v in value.split(",") if v.strip()]
        assert all(f.startswith("man/") and f.rsplit(".", 1)[1] == key[-1] for f in files), key
        installed += [f[len("man/") :] for f in files]
    assert sorted(installed) == PAGES


# -- the protocol's examples -------------------------------------------------------


def _digest_filled(text_value: object) -> object:
    # The pages elide the 64 digits of a schema digest as `sha256:<hex>`.
    if text_value == "sha256:<hex>":
        return schema.schema_digest()
    if isinstance(text_value, dict):
        return {k: _digest_filled(v) for k, v in text_value.items()}
    if isinstance(text_value, list):
        return [_digest_filled(v) for v in text_value]
    return text_value


def test_protocol_examples_are_valid_messages(pages):
    messages = [_digest_filled(m) for m in json_examples(pages["mu-plugin-protocol.7"])]
    sent: Dict[int, str] = {}  # id -> method of each request shown so far
    seen = set()
    for message in messages:
        shown = json.dumps(message)
        assert message.get("jsonrpc") == "2.0", shown
        # each is one line on the wire, and survives mu's framing unchanged
        assert framing.decode(framing.encode(message)[:-1]) == message
        if "method" in message and "id" in message:
            # a request from mu
            assert set(message) <= {"jsonrpc", "id", "method", "params"}, shown
            assert isinstance(message["id"], int) and not isinstance(message["id"], bool), shown
            schema.validate_params(message["method"], message["params"])
            sent[message["id"]] = message["method"]
            seen.add("request")
        elif "method" in message:
            if message["method"] in envelope.NOTIFICATIONS:
                envelope.parse(message)
                schema.validate_notification(message["method"], message["params"])
                seen.add("plugin notification")
            else:
                assert set(message) == {"jsonrpc", "method", "params"}, shown
                schema.validate_notification(message["method"], message["params"])
                if "id" in message["params"]:
                    assert message["params"]["id"] in sent, f"a cancel of no request shown: {shown}"
                seen.add("mu notification")
        else:
            reply = envelope.parse(message)  # what mu accepts from a plugin
            assert reply.id in sent, f"a reply to no request shown: {shown}"
            if reply.error is None:
                schema.validate_result(sent[reply.id], reply.result)
                seen.add("result")
            else:
                schema.validate_definition("errorData", reply.error.data)
                seen.add("error")
    assert {"request", "result", "error", "mu notification"} <= seen, seen
    assert "initialize" in sent.values()


def test_handshake_example_is_the_one_mu_sends(pages):
    from mu.runtime.client import PROTOCOL_RANGE

    messages = json_examples(pages["mu-plugin-protocol.7"])
    initialize = [m for m in messages if m.get("method") == "initialize"]
    assert initialize and initialize[0]["params"] == {"protocol": PROTOCOL_RANGE, "mu": mu.__version__}


# -- the JSON the verbs print ------------------------------------------------------


def test_json_examples_show_what_the_verbs_print(fake, pages):
    added = run_mu("plugin", "add", "fake", "--", str(fake))
    assert added.returncode == 0, added.stderr
    shown = json.loads(run_mu("plugin", "show", "fake", "--json").stdout)
    listed = json.loads(run_mu("plugin", "list", "--json").stdout)
    logged = json.loads(run_mu("log", "--json").stdout)
    assert logged["entries"], "mu plugin add wrote no journal entry"

    show_example = [m for m in json_examples(pages["mu-plugin.1"]) if "argv" in m]
    assert len(show_example) == 1
    assert list(shown) == list(show_example[0])
    assert listed == {"plugins": [shown]}
    assert '{"plugins":[...]}' in pages["mu-plugin.1"].section_text("COMMANDS").replace(" ", "")

    entry_example = [m for m in json_examples(pages["mu-log.1"]) if "muPid" in m]
    assert len(entry_example) == 1
    for entry in logged["entries"]:
        assert list(entry) == list(entry_example[0])


# -- rendering ---------------------------------------------------------------------


def _renderer() -> List[str]:
    if shutil.which("groff"):
        return ["groff", "-man", "-Tutf8", "-ww", "-P-c"]
    if shutil.which("man"):
        return ["man", "-l", "-Tutf8"]
    pytest.skip("neither groff nor man is installed (Debian: groff-base)")


def render(filename: str, width: Optional[int] = None) -> Tuple[str, str]:
    """The page as a terminal shows it, bold and underline stripped, and
    what the formatter said on stderr."""
    argv = _renderer()
    env = dict(os.environ, LC_ALL="C.UTF-8", GROFF_NO_SGR="1", MANPAGER="cat", PAGER="cat")
    if width is not None:
        if argv[0] == "groff":
            argv = argv + [f"-rLL={width}n"]
        else:
            env["MANROFFOPT"] = f"-rLL={width}n"  # man-db passes it to groff
    # Its own group, so that a formatter stuck past the timeout is killed
    # with every process of its pipeline.
    proc = subprocess.Popen(
        argv + [os.path.join(MAN, filename)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=RENDER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the leader is unreaped: the group is ours
        proc.communicate()
        raise
    assert proc.returncode == 0, err.decode("utf-8", "replace")
    text = out.decode("utf-8")
    text = re.sub(r".\x08", "", text)  # overstrike bold and underline
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # or SGR, where grotty uses it
    return text, err.decode("utf-8", "replace")


@pytest.mark.parametrize("filename", PAGES)
def test_page_renders_without_warnings(filename):
    text, warnings = render(filename)
    assert warnings == ""
    wide = [line for line in text.splitlines() if len(line) > RENDER_WIDTH]
    assert not wide, f"{filename}: lines over {RENDER_WIDTH} columns: {wide}"


def rendered_section(text: str, title: str) -> List[str]:
    lines = text.splitlines()
    start = lines.index(title) + 1
    out = []
    for line in lines[start:]:
        if line and not line[0].isspace():
            break
        if line.strip():
            out.append(line.strip())
    return out


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_rendered_synopsis_is_the_usage(group):
    # What a reader sees, wide enough that no usage line wraps; minus signs
    # that a device prints as U+2212 count as the `-` they stand for.
    text, _ = render(page_of(group), width=300)
    shown = [line.replace("\u2212", "-") for line in rendered_section(text, "SYNOPSIS")]
    assert shown == doc_section(GROUPS[group], "Usage:")


def test_page_sources_are_ascii():
    for filename in PAGES:
        with open(os.path.join(MAN, filename), "rb") as f:
            data = f.read()
        assert data.isascii(), f"{filename} is not ASCII: use roff escapes"
        assert data.endswith(b"\n")
