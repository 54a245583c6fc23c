"""Dropping the fields a CRD's structural schema does not name, as the API server prunes them.

Within a served version the CRDs only grow, and the newest release's CRDs are the ones
installed (they go first in an upgrade and stay after a rollback). So an object an operator
receives may carry a field only a newer release knows. Any Kubernetes client ignores fields
it does not know; the API server itself keeps only what the installed schema names. This
module does the same against this release's schema, so that the operator reconciles a
newer release's object with the fields it knows and says which it left out, instead of
refusing the whole object. (A typo never gets this far on a real server: it was refused at
write time against the installed CRD.)

A field is unknown where its object's schema names it in no ``properties``, has no
``additionalProperties`` schema for it (a map's values) and does not set
``x-kubernetes-preserve-unknown-fields``; that holds at any depth, inside list items and
map values too. What is kept is not checked here: a value of the wrong type is left as it
is, for the schema check to refuse. Paths name fields, never values.

Pure: the input is not changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grid.models.schema import join_path

# Left to the API server's own handling (ObjectMeta), never pruned by a CRD's schema.
_METADATA = "metadata"


def prune_unknown_fields(
    value: object, schema: Mapping[str, Any]
) -> tuple[object, tuple[str, ...]]:
    """``value`` without the fields ``schema`` (a structural OpenAPI v3 schema) does not
    name, and the path of each field dropped (``spec.egress.fooBar``,
    ``spec.models[0].newThing``), in document order."""
    dropped: list[str] = []
    pruned = _prune(value, schema, "", dropped)
    return pruned, tuple(dropped)


def prune_custom_resource(
    manifest: Mapping[str, Any], crd: Mapping[str, Any]
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``manifest`` without the fields its version's schema in ``crd`` (a
    CustomResourceDefinition manifest) does not name, and their paths. ``metadata`` is left
    as it is; so is a manifest of a version ``crd`` does not serve (the schema check says
    so)."""
    schema = _version_schema(manifest, crd)
    if schema is None:
        return dict(manifest), ()
    rest = {key: item for key, item in manifest.items() if key != _METADATA}
    dropped: list[str] = []
    kept = _prune_object(rest, schema, "", dropped)
    if _METADATA in manifest:
        kept[_METADATA] = manifest[_METADATA]
    return kept, tuple(dropped)


def _version_schema(
    manifest: Mapping[str, Any], crd: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    spec = crd["spec"]
    for version in spec["versions"]:
        if manifest.get("apiVersion") == f"{spec['group']}/{version['name']}":
            schema: Mapping[str, Any] = version["schema"]["openAPIV3Schema"]
            return schema
    return None


def _prune(value: object, schema: Mapping[str, Any], path: str, dropped: list[str]) -> object:
    keeps_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    if isinstance(value, Mapping) and (schema.get("type") == "object" or keeps_unknown):
        return _prune_object(value, schema, path, dropped)
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        return [
            _prune(item, items, join_path(path, index), dropped) for index, item in enumerate(value)
        ]
    # A scalar, or a value of another type than the schema's: the schema check refuses that.
    return value


def _prune_object(
    value: Mapping[str, Any], schema: Mapping[str, Any], path: str, dropped: list[str]
) -> dict[str, Any]:
    properties: Mapping[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    # `additionalProperties: true` allows any field, as preserving unknown fields does.
    keeps_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True
    kept: dict[str, Any] = {}
    for key, item in value.items():
        child = join_path(path, str(key))
        if key in properties:
            kept[key] = _prune(item, properties[key], child, dropped)
        elif isinstance(extra, Mapping):
            kept[key] = _prune(item, extra, child, dropped)
        elif keeps_unknown:
            kept[key] = item
        else:
            dropped.append(child)
    return kept
