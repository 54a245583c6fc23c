"""Whether a CustomResourceDefinition changed only additively within its served versions.

Within one served version (``v1alpha1`` today) a release may only widen what the schema
accepts: objects the previous release stored must still validate, clients written for it
must still find every field, kind and endpoint they used, and a mesh mixing both releases
must read each other's resources. Serving a narrower schema takes a new version.

:func:`non_additive_changes` compares two CRD documents (``old`` and ``new``, loaded YAML)
and lists every change that is not additive: removed versions, properties and
subresources; renamed group, scope or names; narrowed types and value checks; newly
required fields; changed list semantics. New ``x-kubernetes-validations`` rules on
existing fields are listed too, as needing review: whether a rule refuses an object stored
before depends on the rule, which no comparison of schemas can decide. Changes recorded as
reviewed (:mod:`grid.models.crd_review`, for this repository's CRDs) are left out.

Pure: no I/O. The documents are read, never changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from grid.models.crd_review import REVIEWED, Review

# Keys of the CRD's ``spec.names`` that clients address resources by.
_RENAMEABLE_NAMES = ("kind", "plural", "singular", "listKind")
_ADDITIVE_NAME_LISTS = ("shortNames", "categories")

# Bounds of lengths and counts: a new one, or a tighter one, refuses values accepted before.
_UPPER_LIMITS = ("maxLength", "maxItems", "maxProperties")
_LOWER_LIMITS = ("minLength", "minItems", "minProperties")

# Keys whose change alters how server-side apply merges a list or map, so that managers
# written for the old semantics overwrite or lose each other's entries.
_MERGE_KEYS = ("x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type")
_MERGE_DEFAULTS: Mapping[str, object] = {
    "x-kubernetes-list-type": "atomic",
    "x-kubernetes-map-type": "granular",
}

# Value checks beyond the structural keywords: no comparison can tell whether a changed one
# accepts everything the old one did.
_COMBINATORS = ("anyOf", "allOf", "oneOf", "not")


@dataclass(frozen=True, slots=True)
class NonAdditiveChange:
    """One change between two CRDs that is not additive.

    ``version`` is the served version whose schema or endpoints changed, or ``None`` for a
    change to the CRD as a whole. ``path`` is a JSON path: into the custom object
    (``.spec.egress.address``; ``[*]`` an array's items, ``.*`` a map's values) for a
    schema change, into the CRD (``spec.scope``) otherwise. ``rule`` names the kind of
    change in a word or two, for tools; ``detail`` says what changed. ``needs_review``
    marks a change that may or may not refuse stored objects (a new validation rule), and
    ``validation_rule`` holds the CEL text of a new rule."""

    crd: str
    version: str | None
    path: str
    rule: str
    detail: str
    needs_review: bool = False
    validation_rule: str = ""

    def reviewed_in(self, review: Review) -> bool:
        """Whether ``review`` records this change as reviewed."""
        if self.validation_rule:
            return self.validation_rule in review.rules
        return (self.crd, self.path, self.detail) in review.narrowings

    def __str__(self) -> str:
        where = " ".join(part for part in (self.crd, self.version, self.path) if part)
        review = " (needs review)" if self.needs_review else ""
        return f"{where}: {self.detail}{review}"


def non_additive_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], reviewed: Review = REVIEWED
) -> list[NonAdditiveChange]:
    """Every change from the CRD ``old`` to the CRD ``new`` that is not additive within the
    versions ``old`` serves and that ``reviewed`` does not record, CRD-wide changes first,
    then each version's in ``old``'s order."""
    name = crd_name(old)
    found: list[NonAdditiveChange] = []
    old_spec, new_spec = _mapping(old.get("spec")), _mapping(new.get("spec"))

    def crd_wide(path: str, rule: str, detail: str) -> None:
        found.append(NonAdditiveChange(name, None, path, rule, detail))

    for key in ("group", "scope"):
        if old_spec.get(key) != new_spec.get(key):
            crd_wide(
                f"spec.{key}", f"{key} changed", _changed(old_spec.get(key), new_spec.get(key))
            )
    old_names, new_names = _mapping(old_spec.get("names")), _mapping(new_spec.get("names"))
    for key in _RENAMEABLE_NAMES:
        if key in old_names and old_names.get(key) != new_names.get(key):
            crd_wide(
                f"spec.names.{key}", "name changed", _changed(old_names[key], new_names.get(key))
            )
    for key in _ADDITIVE_NAME_LISTS:
        removed = _missing(old_names.get(key), new_names.get(key))
        if removed:
            crd_wide(f"spec.names.{key}", "name removed", f"{_listed(removed)} removed")

    new_versions = {version.get("name"): version for version in _versions(new_spec)}
    for old_version in _versions(old_spec):
        if not (old_version.get("served") or old_version.get("storage")):
            continue  # nobody reads it and nothing is stored in it: dropping it breaks no one
        version_name = str(old_version.get("name"))
        new_version = new_versions.get(version_name)
        path = f"spec.versions[{version_name}]"
        if new_version is None:
            found.append(
                NonAdditiveChange(name, version_name, path, "version removed", "version removed")
            )
            continue
        if old_version.get("served") and not new_version.get("served"):
            found.append(
                NonAdditiveChange(
                    name, version_name, f"{path}.served", "version removed", "no longer served"
                )
            )
        found.extend(_subresource_changes(name, version_name, path, old_version, new_version))
        old_schema = _schema_of(old_version)
        if old_schema is not None:
            comparison = _SchemaComparison(name, version_name)
            comparison.compare(old_schema, _schema_of(new_version) or {}, "")
            found.extend(comparison.found)
    return [change for change in found if not change.reviewed_in(reviewed)]


def non_additive_changes_of_all(
    old_crds: Iterable[Mapping[str, Any]],
    new_crds: Iterable[Mapping[str, Any]],
    reviewed: Review = REVIEWED,
) -> list[NonAdditiveChange]:
    """Every non-additive change from one set of CRDs to another that ``reviewed`` does not
    record, matched by name: a CRD of ``old_crds`` that ``new_crds`` lacks is a change too.
    CRDs new in ``new_crds`` are additions."""
    new_by_name = {crd_name(crd): crd for crd in new_crds}
    found: list[NonAdditiveChange] = []
    for old in old_crds:
        name = crd_name(old)
        if name in new_by_name:
            found.extend(non_additive_changes(old, new_by_name[name], reviewed))
        else:
            found.append(NonAdditiveChange(name, None, "", "crd removed", "the CRD was removed"))
    return found


def crd_name(crd: Mapping[str, Any]) -> str:
    """The CRD's ``metadata.name`` (``<plural>.<group>``), rebuilt from its spec if absent."""
    name = _mapping(crd.get("metadata")).get("name")
    if isinstance(name, str) and name:
        return name
    spec = _mapping(crd.get("spec"))
    return f"{_mapping(spec.get('names')).get('plural')}.{spec.get('group')}"


def _subresource_changes(
    crd: str,
    version: str,
    path: str,
    old_version: Mapping[str, Any],
    new_version: Mapping[str, Any],
) -> list[NonAdditiveChange]:
    old_subresources = _mapping(old_version.get("subresources"))
    new_subresources = _mapping(new_version.get("subresources"))
    found: list[NonAdditiveChange] = []
    for key in ("status", "scale"):
        where = f"{path}.subresources.{key}"
        if key not in old_subresources:
            continue
        if key not in new_subresources:
            detail = f"the {key} subresource was removed"
            found.append(NonAdditiveChange(crd, version, where, "subresource removed", detail))
        elif old_subresources[key] != new_subresources[key]:
            # The scale subresource's paths: autoscalers written for the old ones would
            # read or write other fields.
            change = _changed(old_subresources[key], new_subresources[key])
            detail = f"the {key} subresource {change}"
            found.append(NonAdditiveChange(crd, version, where, "subresource changed", detail))
    return found


class _SchemaComparison:
    """Walks an old OpenAPI v3 schema and the new one side by side, collecting changes."""

    def __init__(self, crd: str, version: str) -> None:
        self.crd = crd
        self.version = version
        self.found: list[NonAdditiveChange] = []

    def report(
        self,
        path: str,
        rule: str,
        detail: str,
        *,
        needs_review: bool = False,
        validation_rule: str = "",
    ) -> None:
        self.found.append(
            NonAdditiveChange(
                self.crd, self.version, path or ".", rule, detail, needs_review, validation_rule
            )
        )

    def compare(self, old: Mapping[str, Any], new: Mapping[str, Any], path: str) -> None:
        old_type, new_type = _type_of(old), _type_of(new)
        if old_type != new_type:
            # Every value stored under the old type is now refused or read differently;
            # what lies below no longer matches anyway.
            self.report(path, "type changed", f"type changed from {old_type} to {new_type}")
            return
        if old.get("nullable") and not new.get("nullable"):
            self.report(path, "nullable removed", "no longer nullable: a stored null is refused")
        if old.get("x-kubernetes-preserve-unknown-fields") and not new.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            self.report(
                path,
                "unknown fields pruned",
                "x-kubernetes-preserve-unknown-fields removed: fields kept until now are pruned",
            )
        self._values(old, new, path)
        self._merge_semantics(old, new, path)
        self._validation_rules(old, new, path)
        self._children(old, new, path)

    def _values(self, old: Mapping[str, Any], new: Mapping[str, Any], path: str) -> None:
        """The checks on a value itself: enum, bounds, pattern, format, multipleOf."""
        if "enum" in new:
            if "enum" not in old:
                self.report(path, "enum added", f"values limited to {_listed(new['enum'])}")
            else:
                removed = _missing(old["enum"], new["enum"])
                if removed:
                    self.report(path, "enum narrowed", f"enum values removed: {_listed(removed)}")
        for key in _UPPER_LIMITS:
            if key in new and (key not in old or new[key] < old[key]):
                self.report(path, f"{key} narrowed", _limit(key, old.get(key), new[key], "lowered"))
        for key in _LOWER_LIMITS:
            # A zero minimum is no minimum: adding one changes nothing.
            if new.get(key, 0) > old.get(key, 0):
                self.report(path, f"{key} narrowed", _limit(key, old.get(key), new[key], "raised"))
        self._range_bound(old, new, path, "maximum")
        self._range_bound(old, new, path, "minimum")
        if "pattern" in new and new["pattern"] != old.get("pattern"):
            # Whether one regular expression matches everything another did is not
            # decidable here: any change could refuse a stored value.
            detail = "pattern changed" if "pattern" in old else "pattern added"
            self.report(path, "pattern changed", f"{detail}: {new['pattern']}")
        if "format" in new and new["format"] != old.get("format"):
            detail = _changed(old.get("format"), new["format"]) if "format" in old else "added"
            self.report(path, "format changed", f"format {detail}")
        if "multipleOf" in new:
            old_step = old.get("multipleOf")
            if old_step is None or new["multipleOf"] == 0 or old_step % new["multipleOf"] != 0:
                self.report(
                    path,
                    "multipleOf changed",
                    _limit("multipleOf", old_step, new["multipleOf"], "changed"),
                )
        for key in _COMBINATORS:
            if key in new and new[key] != old.get(key):
                self.report(
                    path,
                    f"{key} changed",
                    f"{key} changed: it may refuse values accepted before",
                    needs_review=True,
                )

    def _range_bound(
        self, old: Mapping[str, Any], new: Mapping[str, Any], path: str, key: str
    ) -> None:
        exclusive_key = "exclusiveMaximum" if key == "maximum" else "exclusiveMinimum"
        if key not in new:
            return
        new_bound, new_exclusive = new[key], bool(new.get(exclusive_key))
        if key not in old:
            self.report(
                path, f"{key} narrowed", f"{key} added ({_bound_text(new_bound, new_exclusive)})"
            )
            return
        old_bound, old_exclusive = old[key], bool(old.get(exclusive_key))
        tighter = new_bound < old_bound if key == "maximum" else new_bound > old_bound
        if tighter or (new_bound == old_bound and new_exclusive and not old_exclusive):
            old_text = _bound_text(old_bound, old_exclusive)
            new_text = _bound_text(new_bound, new_exclusive)
            self.report(path, f"{key} narrowed", f"{key} narrowed from {old_text} to {new_text}")

    def _merge_semantics(self, old: Mapping[str, Any], new: Mapping[str, Any], path: str) -> None:
        for key in _MERGE_KEYS:
            default = _MERGE_DEFAULTS.get(key)
            old_value, new_value = old.get(key, default), new.get(key, default)
            if old_value != new_value:
                self.report(path, f"{key} changed", f"{key} {_changed(old_value, new_value)}")

    def _validation_rules(self, old: Mapping[str, Any], new: Mapping[str, Any], path: str) -> None:
        old_rules = {_mapping(rule).get("rule") for rule in old.get("x-kubernetes-validations", ())}
        for rule in new.get("x-kubernetes-validations", ()):
            text = _mapping(rule).get("rule")
            if text not in old_rules:
                self.report(
                    path,
                    "validation rule added",
                    f"new validation rule {text!r} may refuse objects stored before",
                    needs_review=True,
                    validation_rule=str(text),
                )

    def _children(self, old: Mapping[str, Any], new: Mapping[str, Any], path: str) -> None:
        old_properties = _mapping(old.get("properties"))
        new_properties = _mapping(new.get("properties"))
        for name, old_child in old_properties.items():
            child_path = f"{path}.{name}"
            if name not in new_properties:
                self.report(child_path, "property removed", "property removed")
            else:
                self.compare(_mapping(old_child), _mapping(new_properties[name]), child_path)
        old_required = set(old.get("required", ()))
        for name in new.get("required", ()):
            if name not in old_required:
                detail = "newly required: objects stored without it are refused"
                self.report(f"{path}.{name}", "newly required", detail)
        if isinstance(old.get("items"), Mapping):
            self.compare(old["items"], _mapping(new.get("items")), f"{path}[*]")
        old_values, new_values = old.get("additionalProperties"), new.get("additionalProperties")
        if old_values is True or isinstance(old_values, Mapping):
            if not (new_values is True or isinstance(new_values, Mapping)):
                self.report(f"{path}.*", "map values removed", "map entries are no longer allowed")
            elif isinstance(old_values, Mapping) and isinstance(new_values, Mapping):
                self.compare(old_values, new_values, f"{path}.*")
            elif isinstance(new_values, Mapping):
                self.report(f"{path}.*", "type changed", "map values of any type now have a schema")


def _type_of(node: Mapping[str, Any]) -> str:
    """The node's type in words: an OpenAPI type, ``int-or-string`` or ``any``."""
    if node.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    return str(node.get("type", "any"))


def _schema_of(version: Mapping[str, Any]) -> Mapping[str, Any] | None:
    schema = _mapping(version.get("schema")).get("openAPIV3Schema")
    return schema if isinstance(schema, Mapping) else None


def _versions(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    versions = spec.get("versions")
    if not isinstance(versions, list):
        return []
    return [version for version in versions if isinstance(version, Mapping)]


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _missing(old: object, new: object) -> list[Any]:
    """The entries of the list ``old`` that the list ``new`` lacks (each list may be absent)."""
    old_items = old if isinstance(old, list) else []
    new_items = new if isinstance(new, list) else []
    return [item for item in old_items if item not in new_items]


def _listed(values: Iterable[Any]) -> str:
    return ", ".join(repr(value) for value in values)


def _changed(old: object, new: object) -> str:
    return f"changed from {old!r} to {new!r}"


def _limit(key: str, old: object, new: object, change: str) -> str:
    return f"{key} added ({new})" if old is None else f"{key} {change} from {old} to {new}"


def _bound_text(bound: object, exclusive: bool) -> str:
    return f"{bound}, exclusive" if exclusive else f"{bound}"
