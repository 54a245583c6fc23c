"""The operator's view of Grid's resources, fed by kopf's watch events.

Each resource keeps its latest object (for Events and status), the last version that passed
validation (what the engine runs on: a broken edit never replaces a working resource) and
the problems of the latest version (and the fields of it this release does not know,
which are left out rather than refused). Pure: no I/O.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from grid.models.network import GridNetwork
from grid.models.provider import InferenceProvider
from grid.models.resources import Resource
from grid.models.site import GridSite
from grid.operator.validation import Checked, check_manifest

JsonObject = dict[str, Any]
NETWORK = "GridNetwork"
SITE = "GridSite"
PROVIDER = "InferenceProvider"
KINDS = (NETWORK, SITE, PROVIDER)


@dataclass(slots=True)
class Entry:
    """One resource as last seen."""

    kind: str
    name: str
    body: JsonObject
    """The latest object (status included) as the API served it."""
    resource: Resource | None = None
    """The last version that passed validation."""
    problems: tuple[str, ...] = ()
    """Why the latest version is invalid (empty when it is valid)."""
    ignored: tuple[str, ...] = ()
    """Fields of the latest version this release does not know (a newer release's), left
    out of it: their paths."""
    essence: str = ""

    @property
    def generation(self) -> int | None:
        value = self.body.get("metadata", {}).get("generation")
        return value if isinstance(value, int) else None

    @property
    def status(self) -> Mapping[str, Any]:
        status = self.body.get("status")
        return status if isinstance(status, Mapping) else {}

    @property
    def reference(self) -> JsonObject:
        """What an Event needs to name the object."""
        metadata = self.body.get("metadata", {})
        return {
            "apiVersion": self.body.get("apiVersion"),
            "kind": self.kind,
            "metadata": {"name": self.name, "uid": metadata.get("uid")},
        }

    @property
    def network_ref(self) -> str | None:
        """The GridNetwork a site or provider belongs to (as last written, valid or not)."""
        if self.kind == NETWORK:
            return self.name
        spec = self.body.get("spec")
        ref = spec.get("gridNetworkRef") if isinstance(spec, Mapping) else None
        return ref if isinstance(ref, str) else None


def _essence(body: Mapping[str, Any]) -> str:
    """What a change must touch to matter: spec, labels and generation (a status write or
    kopf's own bookkeeping does not)."""
    metadata = body.get("metadata") or {}
    return json.dumps(
        [body.get("spec"), metadata.get("labels"), metadata.get("generation")],
        sort_keys=True,
        default=str,
    )


@dataclass
class ResourceCache:
    """Every GridNetwork, GridSite and InferenceProvider, by kind and name."""

    _entries: dict[str, dict[str, Entry]] = field(
        default_factory=lambda: {kind: {} for kind in KINDS}
    )
    revision: int = 0
    """Goes up with every change that matters (what :meth:`apply` and :meth:`remove`
    report), so a reader can tell whether anything changed since it last looked."""

    def apply(self, body: Mapping[str, Any]) -> Entry | None:
        """Record an added or modified object. Returns its entry when something that
        matters changed (spec, labels, generation), None when only status or bookkeeping
        did or the object is not a Grid resource."""
        kind = body.get("kind")
        name = (body.get("metadata") or {}).get("name")
        if kind not in self._entries or not isinstance(name, str):
            return None
        raw = copy.deepcopy(dict(body))
        raw.get("metadata", {}).pop("managedFields", None)
        entries = self._entries[kind]
        entry = entries.get(name)
        essence = _essence(raw)
        if entry is not None and entry.essence == essence:
            entry.body = raw
            return None
        checked: Checked = check_manifest(raw)
        if entry is None:
            entry = Entry(kind, name, raw)
            entries[name] = entry
        entry.body = raw
        entry.essence = essence
        entry.problems = checked.problems
        entry.ignored = checked.ignored
        if checked.resource is not None:
            entry.resource = checked.resource
        self.revision += 1
        return entry

    def remove(self, kind: str, name: str) -> Entry | None:
        removed = self._entries.get(kind, {}).pop(name, None)
        if removed is not None:
            self.revision += 1
        return removed

    def get(self, kind: str, name: str) -> Entry | None:
        return self._entries.get(kind, {}).get(name)

    def entries(self, kind: str) -> Iterator[Entry]:
        yield from list(self._entries[kind].values())

    def network(self, name: str) -> Entry | None:
        return self.get(NETWORK, name)

    def sites_of(self, network: str) -> list[GridSite]:
        """The valid GridSites of ``network`` (their last valid versions)."""
        return [
            entry.resource
            for entry in self.entries(SITE)
            if isinstance(entry.resource, GridSite)
            and entry.resource.spec.grid_network_ref == network
        ]

    def providers_of(self, network: str) -> list[InferenceProvider]:
        """The valid InferenceProviders of ``network`` (their last valid versions)."""
        return [
            entry.resource
            for entry in self.entries(PROVIDER)
            if isinstance(entry.resource, InferenceProvider)
            and entry.resource.spec.grid_network_ref == network
        ]

    def members_of(self, network: str) -> list[Entry]:
        """Sites and providers whose latest version names ``network``."""
        return [
            entry
            for kind in (SITE, PROVIDER)
            for entry in self.entries(kind)
            if _belongs(entry, network)
        ]

    def orphans(self) -> list[Entry]:
        """Sites and providers whose network does not exist here, or never had a valid
        spec (so no network serves them)."""
        networks = self._entries[NETWORK]
        return [
            entry
            for kind in (SITE, PROVIDER)
            for entry in self.entries(kind)
            if entry.network_ref is None
            or entry.network_ref not in networks
            or networks[entry.network_ref].resource is None
        ]


def _belongs(entry: Entry, network: str) -> bool:
    if entry.resource is not None and not entry.problems:
        resource = entry.resource
        return isinstance(resource, GridSite | InferenceProvider) and (
            resource.spec.grid_network_ref == network
        )
    return entry.network_ref == network


def valid_network(entry: Entry | None) -> GridNetwork | None:
    """The last valid version of a network entry."""
    if entry is None or not isinstance(entry.resource, GridNetwork):
        return None
    return entry.resource
