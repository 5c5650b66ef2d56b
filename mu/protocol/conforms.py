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
    from typing import Any, Dict, Optional

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
    return _check(defs, defs[name], value)


def _all(results) -> Optional[bool]:
    unsure = False
    for result in results:
        if result is False:
            return False
        if result is None:
            unsure = True
    return None if unsure else True


def _check(defs: Dict[str, Any], schema: Any, value: Any) -> Optional[bool]:
    if schema is True:
        return True
    if schema is False:
        return False
    if not isinstance(schema, dict) or not _DECIDED.issuperset(schema):
        return None
    results = []
    if "type" in schema:
        kinds = schema["type"]
        found = _all_kinds(kinds if isinstance(kinds, list) else [kinds], value)
        if found is not True:
            return found
    if "$ref" in schema:
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/$defs/") or "~" in ref:
            return None
        target = ref[len("#/$defs/"):]
        if target not in defs:
            return None
        results.append(_check(defs, defs[target], value))
    if "enum" in schema:
        results.append(_among(schema["enum"], value))
    if "const" in schema:
        results.append(_among([schema["const"]], value))
    if isinstance(value, dict):
        results.append(_object(defs, schema, value))
    elif isinstance(value, str):
        results.append(_string(schema, value))
    elif isinstance(value, list):
        results.append(_array(defs, schema, value))
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and "minimum" in schema:
        minimum = schema["minimum"]
        if isinstance(minimum, bool) or not isinstance(minimum, (int, float)):
            return None
        results.append(value >= minimum)
    for sub in schema.get("allOf", ()):
        results.append(_check(defs, sub, value))
    if "anyOf" in schema:
        results.append(_any(_check(defs, sub, value) for sub in schema["anyOf"]))
    if "if" in schema:
        condition = _check(defs, schema["if"], value)
        if condition is None:
            return None
        branch = schema.get("then" if condition else "else", True)
        results.append(_check(defs, branch, value))
    return _all(results)


def _any(results) -> Optional[bool]:
    unsure = False
    for result in results:
        if result is True:
            return True
        if result is None:
            unsure = True
    return None if unsure else False


def _all_kinds(kinds: list, value: Any) -> Optional[bool]:
    unsure = False
    for kind in kinds:
        matched = _is_kind(kind, value)
        if matched:
            return True
        if matched is None:
            unsure = True
    return None if unsure else False


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


def _object(defs: Dict[str, Any], schema: Dict[str, Any], value: Dict[str, Any]) -> Optional[bool]:
    if not all(isinstance(key, str) for key in value):
        return None
    results = []
    required = schema.get("required", [])
    if not isinstance(required, list):
        return None
    if any(key not in value for key in required):
        return False
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        return False
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        return False
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    if not isinstance(properties, dict) or not isinstance(patterns, dict):
        return None
    search = None
    if patterns:
        import re

        search = re.search
    additional = schema.get("additionalProperties", True)
    for key, item in value.items():
        matched = False
        if key in properties:
            matched = True
            results.append(_check(defs, properties[key], item))
        for pattern, sub in patterns.items():
            if search(pattern, key):  # type: ignore[misc]
                matched = True
                results.append(_check(defs, sub, item))
        if not matched:
            results.append(_check(defs, additional, item))
        if "propertyNames" in schema:
            results.append(_check(defs, schema["propertyNames"], key))
        if results and results[-1] is False:
            return False
    return _all(results)


def _string(schema: Dict[str, Any], value: str) -> Optional[bool]:
    if "minLength" in schema and len(value) < schema["minLength"]:
        return False
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return False
    if "pattern" in schema:
        import re

        return re.search(schema["pattern"], value) is not None
    return True


def _array(defs: Dict[str, Any], schema: Dict[str, Any], value: list) -> Optional[bool]:
    if "minItems" in schema and len(value) < schema["minItems"]:
        return False
    if "items" in schema:
        return _all(_check(defs, schema["items"], item) for item in value)
    return True
