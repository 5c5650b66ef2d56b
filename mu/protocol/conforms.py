"""Whether a value conforms to a definition of the protocol schema, decided
without `jsonschema` where that can be done exactly.

Every reply a read gets is checked against the schema (protocol "Effects
and replay": a reply that fails is an unknown answer), and importing
`jsonschema` with what it pulls in costs a short verb more than its plugin
calls do.  The schema uses a small part of JSON Schema 2020-12, so this
module decides that part itself: `verdict` answers True (conforms), False
(does not) or None (not sure: a keyword or a value it does not decide
exactly, such as `1.0` for an integer).  `mu.schema` takes a True as
final and asks `jsonschema` in every other case, so a failure is still
reported in jsonschema's words, and a keyword added to the schema later is
never skipped: it makes this module unsure, never wrong.

Exact here means as `jsonschema`'s Draft 2020-12 validator decides: a bool
is neither an integer nor a number, an enum or const compares a bool only
with a bool, lengths count code points, `pattern` is `re.search`, and
`additionalProperties` sees the sibling `properties` and
`patternProperties` only.  tests/test_conforms.py holds the two to the same
answers.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

# Keywords that say nothing about validity.
_ANNOTATIONS = frozenset({"description", "title", "$comment", "default", "examples", "$schema", "$defs"})
_DECIDED = frozenset({
    "type", "$ref", "properties", "required", "additionalProperties", "patternProperties", "propertyNames",
    "minProperties", "maxProperties", "enum", "const", "minimum", "minLength", "maxLength", "pattern", "items",
    "minItems", "allOf", "anyOf", "if", "then", "else",
}) | _ANNOTATIONS


def verdict(defs: Dict[str, Any], name: str, value: Any) -> Optional[bool]:
    """Whether `value` conforms to the definition `name` of `defs` (the
    schema's `$defs`): True, False, or None when not sure."""
    if name not in defs:
        return None
    return _compiled(defs, defs[name])(value)


# Every reply of a read is checked, hundreds a verb over many agents, so
# each schema node is turned once into a function of the value (`_make`),
# which decides without reading the node's keywords again.  Kept by the
# node's identity, with the node itself so an identity is never taken for
# another's: the schema is loaded once.
_MADE: Dict[int, Tuple[Any, Callable[[Any], Optional[bool]]]] = {}


def _compiled(defs: Dict[str, Any], schema: Any) -> Callable[[Any], Optional[bool]]:
    """`schema`'s function, its sub-schemas' made with it, so a check calls
    each directly.  A sub-schema that leads back to one being made (a
    `$ref` loop) gets a stand-in that calls it once it is made."""
    made = _MADE.get(id(schema))
    if made is not None and made[0] is schema:
        return made[1]
    slot: List[Callable[[Any], Optional[bool]]] = []

    def stand_in(value: Any) -> Optional[bool]:
        return slot[0](value)

    _MADE[id(schema)] = (schema, stand_in)
    try:
        function = _make(defs, schema)
    except BaseException:
        del _MADE[id(schema)]
        raise
    slot.append(function)
    _MADE[id(schema)] = (schema, function)
    return function


def _yes(value: Any) -> Optional[bool]:
    return True


def _no(value: Any) -> Optional[bool]:
    return False


def _unsure(value: Any) -> Optional[bool]:
    return None


def _all(results) -> Optional[bool]:
    unsure = False
    for result in results:
        if result is False:
            return False
        if result is None:
            unsure = True
    return None if unsure else True


def _make(defs: Dict[str, Any], schema: Any) -> Callable[[Any], Optional[bool]]:
    """`schema` as a function of the value, its sub-schemas made first
    (`_compiled`: a `$ref` loop is closed by a stand-in).

    It answers as reading the keywords one by one would: the type first
    (a value of none of the types is decided there); then `$ref`, `enum`,
    `const`, the keywords of the value's own kind, `minimum`, `allOf`,
    `anyOf` and `if`, each True, False or None; False as soon as one is
    False, else None if one was not sure (an `if` not sure of its
    condition is not sure of the whole), else True."""
    if schema is True:
        return _yes
    if schema is False:
        return _no
    if not isinstance(schema, dict) or not _DECIDED.issuperset(schema):
        return _unsure
    kinds = schema.get("type")
    if kinds is not None and not isinstance(kinds, list):
        kinds = [kinds]
    # the kinds a plain isinstance decides (no bool-or-int question): one test
    plain = tuple(_PLAIN_KINDS[k] for k in kinds) if kinds and all(k in _PLAIN_KINDS for k in kinds) else None
    ref = schema.get("$ref")
    if ref is not None:
        usable = isinstance(ref, str) and ref.startswith("#/$defs/") and "~" not in ref
        target = ref[len("#/$defs/"):] if usable else None
        if target is None or target not in defs:
            return _unsure
        ref = _compiled(defs, defs[target])
    choices = schema["enum"] if "enum" in schema else None
    const = [schema["const"]] if "const" in schema else None
    of_object = _make_object(defs, schema)
    minimum = schema.get("minimum")
    has_minimum = "minimum" in schema
    subs = [_compiled(defs, sub) for sub in schema.get("allOf", ())]
    alternatives = schema.get("anyOf")
    if alternatives is not None:
        alternatives = [_compiled(defs, sub) for sub in alternatives]
    condition = _compiled(defs, schema.get("if"))
    has_if = "if" in schema
    then = _compiled(defs, schema.get("then", True))
    otherwise = _compiled(defs, schema.get("else", True))

    def check(value: Any) -> Optional[bool]:
        if plain is not None:
            if not isinstance(value, plain):
                return False
        elif kinds is not None:
            found = _all_kinds(kinds, value)
            if found is not True:
                return found
        unsure = False
        if ref is not None:
            said = ref(value)
            if said is False:
                return False
            unsure = said is None
        if choices is not None:
            said = _among(choices, value)
            if said is False:
                return False
            unsure = unsure or said is None
        if const is not None:
            said = _among(const, value)
            if said is False:
                return False
            unsure = unsure or said is None
        if isinstance(value, dict):
            said = of_object(value)
        elif isinstance(value, str):
            said = _string(schema, value)
        elif isinstance(value, list):
            said = _array(defs, schema, value)
        elif has_minimum and isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(minimum, bool) or not isinstance(minimum, (int, float)):
                return None
            said = value >= minimum
        else:
            said = True
        if said is False:
            return False
        unsure = unsure or said is None
        for sub in subs:
            said = sub(value)
            if said is False:
                return False
            unsure = unsure or said is None
        if alternatives is not None:
            said = False
            for sub in alternatives:
                one = sub(value)
                if one is True:
                    said = True
                    break
                if one is None:
                    said = None
            if said is False:
                return False
            unsure = unsure or said is None
        if has_if:
            holds = condition(value)
            if holds is None:
                return None
            said = (then if holds else otherwise)(value)
            if said is False:
                return False
            unsure = unsure or said is None
        return None if unsure else True

    return check


def _make_object(defs: Dict[str, Any], schema: Dict[str, Any]) -> Callable[[Dict[str, Any]], Optional[bool]]:
    """The object keywords of `schema` as a function of a dict value, read
    once (its patterns compiled at the first value with a key to match)."""
    required = schema.get("required", [])
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    if not isinstance(required, list) or not isinstance(properties, dict) or not isinstance(patterns, dict):
        return _unsure
    fewest = schema.get("minProperties")
    most = schema.get("maxProperties")
    names = schema.get("propertyNames")
    additional = _compiled(defs, schema.get("additionalProperties", True))
    names = None if names is None else _compiled(defs, names)
    of_property = {key: _compiled(defs, sub) for key, sub in properties.items()}
    searches: List[Tuple[Any, Any]] = []

    def check(value: Dict[str, Any]) -> Optional[bool]:
        for key in required:
            if key not in value:
                return False
        if (fewest is not None and len(value) < fewest) or (most is not None and len(value) > most):
            return False
        if patterns and value and not searches:
            searches[:] = [(_searcher(pattern), _compiled(defs, sub)) for pattern, sub in patterns.items()]
        unsure = False
        for key, item in value.items():
            if not isinstance(key, str):
                return None
            said = True
            of_key = of_property.get(key)
            matched = of_key is not None
            if matched:
                said = of_key(item)
            for search, sub in searches:
                if said is not False and search(key):
                    matched = True
                    said = _both(said, sub(item))
            if not matched:
                said = additional(item)
            if names is not None and said is not False:
                said = _both(said, names(key))
            if said is False:
                return False
            unsure = unsure or said is None
        return None if unsure else True

    return check


def _both(first: Optional[bool], second: Optional[bool]) -> Optional[bool]:
    """Two answers that must both hold: False, else None if one is not sure, else True."""
    if first is False or second is False:
        return False
    return None if first is None or second is None else True


def _all_kinds(kinds: list, value: Any) -> Optional[bool]:
    unsure = False
    for kind in kinds:
        matched = _is_kind(kind, value)
        if matched:
            return True
        if matched is None:
            unsure = True
    return None if unsure else False


# the kinds a plain isinstance decides exactly as jsonschema does
_PLAIN_KINDS = {"object": dict, "array": list, "string": str, "null": type(None)}


def _is_kind(kind: Any, value: Any) -> Optional[bool]:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "integer":
        if isinstance(value, float):
            return None  # 1.0 is an integer to jsonschema: its call
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return None


def _among(choices: Any, value: Any) -> Optional[bool]:
    if not isinstance(choices, list):
        return None
    if not isinstance(value, (str, bool, int)) and value is not None:
        return None  # a number that is not an int, or a container: jsonschema's call
    for choice in choices:
        if not isinstance(choice, (str, bool, int)) and choice is not None:
            return None
        if type(choice) is type(value) and choice == value:
            return True
    return False


def _string(schema: Dict[str, Any], value: str) -> Optional[bool]:
    if "minLength" in schema and len(value) < schema["minLength"]:
        return False
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return False
    if "pattern" in schema:
        return _searcher(schema["pattern"])(value)
    return True


_HEX = frozenset("0123456789abcdef")
_NAME_FIRST = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_NAME_REST = _NAME_FIRST | {"_", "-"}


def _line(text: str) -> str:
    """`text` without the one newline that `$` lets end it."""
    return text[:-1] if text.endswith("\n") else text


# The shipped schema's patterns, each decided by hand as `re.search`
# decides it (`$` also matches before a last newline), so a read's check
# does not import `re` (milliseconds of a verb's start); any other pattern
# is compiled.  tests/test_conforms.py holds each to `re.search`.
_BY_HAND = {
    "^[^/]+/[^/]+$": lambda t: len(t.split("/")) == 2 and "" not in t.split("/"),
    "^sha256:[0-9a-f]{64}$": lambda t: len(_line(t)) == 71 and _line(t).startswith("sha256:")
    and _HEX.issuperset(_line(t)[7:]),
    "^[a-z0-9][a-z0-9_-]*$": lambda t: _line(t)[:1] in _NAME_FIRST and _line(t) != "" and _NAME_REST.issuperset(_line(t)),
    "^[0-9a-f]{40}([0-9a-f]{24})?$": lambda t: len(_line(t)) in (40, 64) and _HEX.issuperset(_line(t)),
}
_SEARCHERS: Dict[str, Callable[[str], bool]] = {}


def _searcher(pattern: str) -> Callable[[str], bool]:
    """Whether `re.search(pattern, text)` finds a match, as a function of text."""
    found = _SEARCHERS.get(pattern)
    if found is None:
        found = _BY_HAND.get(pattern)
        if found is None:
            import re

            search = re.compile(pattern).search
            found = lambda text: search(text) is not None  # noqa: E731
        _SEARCHERS[pattern] = found
    return found


def _array(defs: Dict[str, Any], schema: Dict[str, Any], value: list) -> Optional[bool]:
    if "minItems" in schema and len(value) < schema["minItems"]:
        return False
    if "items" in schema:
        return _all(_compiled(defs, schema["items"])(item) for item in value)
    return True
