"""Label and field selectors as the Kubernetes API server parses them.

A selector string becomes a predicate over an object; a malformed selector raises
:class:`SelectorError`, which the emulator answers with 400 as a real API server does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

ObjectPredicate = Callable[[Mapping[str, Any]], bool]

_KEY = r"(?:[A-Za-z0-9.-]+/)?[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?)?"
_EXISTS = re.compile(rf"^(?P<negated>!)?\s*(?P<key>{_KEY})$")
_EQUALITY = re.compile(rf"^(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})$")
_SET = re.compile(rf"^(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_FIELD = re.compile(r"^(?P<path>[A-Za-z0-9.]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^,]*)$")

# Fields every resource can be selected by, plus the few extra ones the API server
# indexes for particular kinds (the ones Grid and its tests use).
_COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
_KIND_FIELDS: Mapping[str, frozenset[str]] = {
    "Event": frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
    "Secret": frozenset({"type"}),
    "Namespace": frozenset({"status.phase"}),
}


class SelectorError(ValueError):
    """A label or field selector does not parse, or names a field that cannot be selected."""


def _split_requirements(selector: str) -> list[str]:
    """Split on the commas that separate requirements, not those inside ``in (a,b)``."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced parentheses in selector {selector!r}")
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise SelectorError(f"unbalanced parentheses in selector {selector!r}")
    parts.append("".join(current).strip())
    if any(not part for part in parts):
        raise SelectorError(f"empty requirement in selector {selector!r}")
    return parts


def _labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels = obj.get("metadata", {}).get("labels") or {}
    return labels if isinstance(labels, Mapping) else {}


def _label_requirement(text: str) -> ObjectPredicate:
    if match := _SET.match(text):
        key, op = match["key"], match["op"]
        values = {value.strip() for value in match["values"].split(",") if value.strip()}
        if not values:
            raise SelectorError(f"{op!r} needs at least one value in {text!r}")
        if op == "in":
            return lambda obj: _labels_of(obj).get(key) in values
        return lambda obj: _labels_of(obj).get(key) not in values
    if match := _EQUALITY.match(text):
        key, op, value = match["key"], match["op"], match["value"]
        if op == "!=":
            return lambda obj: _labels_of(obj).get(key) != value
        return lambda obj: _labels_of(obj).get(key) == value
    if match := _EXISTS.match(text):
        key = match["key"]
        if match["negated"]:
            return lambda obj: key not in _labels_of(obj)
        return lambda obj: key in _labels_of(obj)
    raise SelectorError(f"unable to parse label requirement {text!r}")


def parse_label_selector(selector: str | None) -> ObjectPredicate:
    """A predicate for ``?labelSelector=``: equality (``=``, ``==``, ``!=``), set-based
    (``in``, ``notin``) and existence (``key``, ``!key``) requirements, all of which must hold."""
    if not selector or not selector.strip():
        return lambda obj: True
    requirements = [_label_requirement(part) for part in _split_requirements(selector)]
    return lambda obj: all(requirement(obj) for requirement in requirements)


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if path == "source" and isinstance(node, Mapping):
        node = node.get("component")
    return "" if node is None else str(node)


def parse_field_selector(selector: str | None, kind: str | None) -> ObjectPredicate:
    """A predicate for ``?fieldSelector=``. Only the fields the API server indexes for
    ``kind`` are accepted; any other field is an error, as on a real cluster."""
    if not selector or not selector.strip():
        return lambda obj: True
    allowed = _COMMON_FIELDS | _KIND_FIELDS.get(kind or "", frozenset())
    requirements: list[ObjectPredicate] = []
    for part in _split_requirements(selector):
        match = _FIELD.match(part)
        if match is None:
            raise SelectorError(f"invalid field selector requirement {part!r}")
        path, op, value = match["path"], match["op"], match["value"].strip()
        if path not in allowed:
            raise SelectorError(f'field label not supported: "{path}"')
        requirements.append(_field_requirement(path, value, negated=op == "!="))
    return lambda obj: all(requirement(obj) for requirement in requirements)


def _field_requirement(path: str, value: str, *, negated: bool) -> ObjectPredicate:
    if negated:
        return lambda obj: _field_value(obj, path) != value
    return lambda obj: _field_value(obj, path) == value
