"""Checking a custom resource the operator received before it is used.

A real API server rejects a manifest that breaks its CRD's schema; a server that does not
validate (an older CRD, an emulator) lets it through. So the operator checks both layers
itself, once the manifest is within the limits of :mod:`grid.models.limits` (values,
nesting, size: a runaway object is refused before anything walks it deeply): first the
CRD's OpenAPI schema, as the API server would, then the models, which also check what a
schema cannot express (``suspicionTimeout >= probeInterval``, a ``secretRef`` required by
the auth strategy, ...). The status, Grid's own output, is not part of the check. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from grid.errors import InvalidResourceError
from grid.models.crd import crd_for_kind
from grid.models.limits import structure_problem
from grid.models.resources import RESOURCE_KINDS, Resource, load_resource
from grid.models.schema import validate_custom_resource

MAX_PROBLEMS = 20


@dataclass(frozen=True, slots=True)
class Checked:
    """A manifest's verdict: the resource when it is valid, else the problems found (each
    ``field.path: reason``, never quoting a value)."""

    resource: Resource | None
    problems: tuple[str, ...] = ()

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
    """Validate a Grid resource as received from the API (its status is ignored)."""
    desired = {key: value for key, value in manifest.items() if key != "status"}
    kind = desired.get("kind")
    if not isinstance(kind, str) or kind not in RESOURCE_KINDS:
        return Checked(None, (f"kind: must be one of {', '.join(RESOURCE_KINDS)}",))
    too_large = structure_problem(desired)
    if too_large is not None:
        return Checked(None, (too_large,))
    violations = validate_custom_resource(desired, _crd(kind))
    if violations:
        return Checked(None, tuple(f"{violation} (CRD schema)" for violation in violations))
    try:
        return Checked(load_resource(desired))
    except InvalidResourceError as error:
        return Checked(None, tuple(_without_subject(problem) for problem in error.errors))


def _without_subject(problem: Any) -> str:
    """``spec.swim: reason`` (the kind and name are known to whoever reads it)."""
    path = getattr(problem, "path", "")
    reason = getattr(problem, "reason", str(problem))
    return f"{path}: {reason}" if path else str(reason)
