"""Checking a custom resource against its CRD's OpenAPI v3 schema, as the API server does.

The operator runs this itself because a server may not (an emulator, or a CRD installed
with an older schema): a resource that fails gets a clear condition instead of surprising
the engine. It covers the structural-schema keywords the generated CRDs use, with the API
server's strict field validation (unknown fields are errors, as with
``kubectl apply --validate=strict``: what a person writes is held to what the server
checks at write time) and one deliberate difference: an explicit ``null`` for a field that
is not ``nullable`` is an error here, where the server would drop it. The CRDs' CEL rules
(``x-kubernetes-validations``) are not evaluated here: each is the twin of a check of the
models, which run after this one.

The operator does not hold a received object to this release's fields: it first drops the
fields this release does not know (:mod:`grid.models.pruning`, as the server prunes them),
since they are a newer release's, then checks what is left here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from grid.models.fields import DNS_SUBDOMAIN_PATTERN

_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


@dataclass(frozen=True)
class SchemaViolation:
    """One place where a manifest breaks its schema. ``reason`` never quotes the value."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path else self.reason


def validate_custom_resource(
    manifest: Mapping[str, Any], crd: Mapping[str, Any]
) -> list[SchemaViolation]:
    """Every violation of ``crd`` (a CustomResourceDefinition manifest) by ``manifest``:
    apiVersion and kind, metadata.name, then the version's openAPIV3Schema."""
    spec = crd["spec"]
    violations: list[SchemaViolation] = []
    api_version = manifest.get("apiVersion")
    versions = {f"{spec['group']}/{version['name']}": version for version in spec["versions"]}
    if api_version not in versions:
        violations.append(SchemaViolation("apiVersion", f"must be one of {', '.join(versions)}"))
        return violations
    if manifest.get("kind") != spec["names"]["kind"]:
        violations.append(SchemaViolation("kind", f"must be {spec['names']['kind']}"))
    metadata = manifest.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if (
        not isinstance(name, str)
        or len(name) > 253
        or not re.fullmatch(DNS_SUBDOMAIN_PATTERN, name)
    ):
        violations.append(
            SchemaViolation("metadata.name", "must be a DNS subdomain of at most 253 characters")
        )
    schema = versions[str(api_version)]["schema"]["openAPIV3Schema"]
    violations.extend(validate_against_schema(manifest, schema))
    return violations


def validate_against_schema(value: object, schema: Mapping[str, Any]) -> list[SchemaViolation]:
    """Every violation of the structural OpenAPI v3 ``schema`` by ``value``."""
    found: list[SchemaViolation] = []
    _check(value, schema, "", found)
    return found


def join_path(path: str, key: str | int) -> str:
    """``path`` and one step further: ``spec.models`` and 0 give ``spec.models[0]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _check(
    value: object, schema: Mapping[str, Any], path: str, found: list[SchemaViolation]
) -> None:
    if value is None:
        if not schema.get("nullable"):
            found.append(SchemaViolation(path, "must not be null"))
        return
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            found.append(SchemaViolation(path, "must be an integer or a string"))
            return
    else:
        kind = schema.get("type")
        if kind is None:
            if not schema.get("x-kubernetes-preserve-unknown-fields"):
                found.append(SchemaViolation(path, "schema node has no type"))
            return
        if not _has_type(value, kind):
            found.append(SchemaViolation(path, f"must be of type {kind}"))
            return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(str(item) for item in schema["enum"])
        found.append(SchemaViolation(path, f"must be one of: {allowed}"))
    if isinstance(value, str):
        _check_string(value, schema, path, found)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(value, schema, path, found)
    elif isinstance(value, Mapping):
        _check_object(value, schema, path, found)
    elif isinstance(value, list):
        _check_array(value, schema, path, found)


def _has_type(value: object, kind: str) -> bool:
    match kind:
        case "object":
            return isinstance(value, Mapping)
        case "array":
            return isinstance(value, list)
        case "string":
            return isinstance(value, str)
        case "boolean":
            return isinstance(value, bool)
        case "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
    return False


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str]:
    # The API server's RE2 treats a final `$` as end of text; Python's also matches before a
    # trailing newline, so anchor it explicitly.
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


def _check_string(
    value: str, schema: Mapping[str, Any], path: str, found: list[SchemaViolation]
) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        found.append(SchemaViolation(path, f"must be at least {schema['minLength']} characters"))
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        found.append(SchemaViolation(path, f"must be at most {schema['maxLength']} characters"))
    if "pattern" in schema and not _compiled(schema["pattern"]).search(value):
        found.append(SchemaViolation(path, f"must match {schema['pattern']}"))
    if schema.get("format") == "date-time" and not _is_rfc3339(value):
        found.append(SchemaViolation(path, "must be an RFC 3339 date-time"))


def _is_rfc3339(value: str) -> bool:
    if not _RFC3339.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _check_number(
    value: float, schema: Mapping[str, Any], path: str, found: list[SchemaViolation]
) -> None:
    if "minimum" in schema:
        low = schema["minimum"]
        if value < low or (schema.get("exclusiveMinimum") and value == low):
            relation = "greater than" if schema.get("exclusiveMinimum") else "at least"
            found.append(SchemaViolation(path, f"must be {relation} {low}"))
    if "maximum" in schema:
        high = schema["maximum"]
        if value > high or (schema.get("exclusiveMaximum") and value == high):
            relation = "less than" if schema.get("exclusiveMaximum") else "at most"
            found.append(SchemaViolation(path, f"must be {relation} {high}"))


def _check_object(
    value: Mapping[str, Any], schema: Mapping[str, Any], path: str, found: list[SchemaViolation]
) -> None:
    properties: Mapping[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for name in schema.get("required", []):
        if name not in value:
            found.append(SchemaViolation(join_path(path, name), "required field is missing"))
    for key, item in value.items():
        child = join_path(path, str(key))
        if key in properties:
            _check(item, properties[key], child, found)
        elif isinstance(extra, Mapping):
            _check(item, extra, child, found)
        elif properties and not schema.get("x-kubernetes-preserve-unknown-fields"):
            found.append(SchemaViolation(child, "unknown field"))
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        found.append(SchemaViolation(path, f"must have at most {schema['maxProperties']} entries"))


def _check_array(
    value: Sequence[Any], schema: Mapping[str, Any], path: str, found: list[SchemaViolation]
) -> None:
    if "minItems" in schema and len(value) < schema["minItems"]:
        found.append(SchemaViolation(path, f"must have at least {schema['minItems']} items"))
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        found.append(SchemaViolation(path, f"must have at most {schema['maxItems']} items"))
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            _check(item, items, join_path(path, index), found)
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        identities: list[object] = list(value)
    elif list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys", [])
        identities = [
            tuple(item.get(key) for key in keys) if isinstance(item, Mapping) else item
            for item in value
        ]
    else:
        return
    for index, identity in enumerate(identities):
        if identity in identities[:index]:
            found.append(SchemaViolation(join_path(path, index), "duplicates an earlier item"))
