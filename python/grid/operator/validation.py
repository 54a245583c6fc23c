"""Checking a custom resource the operator received before it is used.

A real API server rejects a manifest that breaks its CRD's schema; a server that does not
validate (an older CRD, an emulator) lets it through. So the operator checks both layers
itself, once the manifest is within the limits of :mod:`grid.models.limits` (values,
nesting, size: a runaway object is refused before anything walks it deeply): first the
CRD's OpenAPI schema, as the API server would, then the models, which also check what a
schema cannot express (``suspicionTimeout >= probeInterval``, a ``secretRef`` required by
the auth strategy, ...). The status, Grid's own output, is not part of the check.

Fields this release's schema does not name are not refused: they are dropped first, as the
API server prunes them (:mod:`grid.models.pruning`), and listed. The installed CRDs may be
a newer release's (they go first in an upgrade and stay after a rollback), so such a field
is a newer release's, and the resource is reconciled with the fields this release knows,
as any Kubernetes client reads an object. The server refused real typos at write time.
Everything else stays strict: a wrong type, a missing required field or a value out of
range refuses the resource. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from grid.errors import InvalidResourceError
from grid.models.crd import crd_for_kind
from grid.models.limits import structure_problem
from grid.models.pruning import prune_custom_resource, prune_unknown_fields
from grid.models.resources import RESOURCE_KINDS, Resource, load_resource
from grid.models.schema import validate_custom_resource

MAX_PROBLEMS = 20


@dataclass(frozen=True, slots=True)
class Checked:
    """A manifest's verdict: the resource when it is valid, else the problems found (each
    ``field.path: reason``, never quoting a value)."""

    resource: Resource | None
    problems: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    """Fields this release does not know, left out before the check (their paths)."""

    @property
    def summary(self) -> str:
        """The problems on one line, for a condition or an event."""
        shown = "; ".join(self.problems[:MAX_PROBLEMS])
        more = len(self.problems) - MAX_PROBLEMS
        return shown + (f" (and {more} more)" if more > 0 else "")


@cache
def _crd(kind: str) -> dict[str, Any]:
    return crd_for_kind(kind)


def check_manifest(manifest: Mapping[str, Any]) -> Checked:
    """Validate a Grid resource as received from the API (its status is ignored, and so
    are the fields this release does not know: see :attr:`Checked.ignored`)."""
    desired = {key: value for key, value in manifest.items() if key != "status"}
    kind = desired.get("kind")
    if not isinstance(kind, str) or kind not in RESOURCE_KINDS:
        return Checked(None, (f"kind: must be one of {', '.join(RESOURCE_KINDS)}",))
    too_large = structure_problem(desired)
    if too_large is not None:
        return Checked(None, (too_large,))
    known, ignored = prune_custom_resource(desired, _crd(kind))
    violations = validate_custom_resource(known, _crd(kind))
    if violations:
        problems = tuple(f"{violation} (CRD schema)" for violation in violations)
        return Checked(None, problems, ignored)
    try:
        return Checked(load_resource(known), ignored=ignored)
    except InvalidResourceError as error:
        problems = tuple(_without_subject(problem) for problem in error.errors)
        return Checked(None, problems, ignored)


def known_spec(kind: str, spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """``spec`` of a ``kind`` resource without the fields this release does not know, for
    what reads parts of a spec that has not passed the check (a newer release's field must
    not make a part unreadable)."""
    versions = _crd(kind)["spec"]["versions"]
    stored = next(version for version in versions if version.get("storage"))
    schema = stored["schema"]["openAPIV3Schema"]["properties"]["spec"]
    known, _ = prune_unknown_fields(spec, schema)
    return known if isinstance(known, Mapping) else spec


def _without_subject(problem: Any) -> str:
    """``spec.swim: reason`` (the kind and name are known to whoever reads it)."""
    path = getattr(problem, "path", "")
    reason = getattr(problem, "reason", str(problem))
    return f"{path}: {reason}" if path else str(reason)
