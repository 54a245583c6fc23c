"""Which GridSite this cluster is, and the GridSites created for peers discovered over SWIM.
Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grid.models.fields import DNS_SUBDOMAIN_PATTERN
from grid.models.meta import API_VERSION
from grid.models.network import GridNetwork
from grid.models.site import AUTO_DISCOVER_LABEL, GridSite
from grid.operator.configmaps import NETWORK_LABEL, label_value

_SITE_NAME = re.compile(DNS_SUBDOMAIN_PATTERN)


@dataclass(frozen=True, slots=True)
class LocalSite:
    """This cluster's site name, or why it cannot be told."""

    name: str | None
    how: str
    """How it was found, or the problem (for status and logs)."""


def resolve_local_site(
    explicit: str | None,
    network: str,
    sites: Sequence[GridSite],
    certificate_fingerprint: str | None,
) -> LocalSite:
    """This cluster's GridSite in ``network``: the one given to the operator (``--site``,
    ``GRID_SITE_NAME``); else the site whose pin matches this site's certificate (from
    ``spec.tls.siteCertSecretRef``); else the network's only site that was not discovered
    over SWIM."""
    if explicit:
        return LocalSite(explicit, "given to the operator")
    mine = [site for site in sites if site.spec.grid_network_ref == network]
    if certificate_fingerprint is not None:
        pinned = sorted(
            site.metadata.name for site in mine if site.spec.trust.match(certificate_fingerprint)
        )
        if len(pinned) == 1:
            return LocalSite(pinned[0], "its pin matches this site's certificate")
        if len(pinned) > 1:
            return LocalSite(
                None,
                f"GridSites {', '.join(pinned)} all pin this site's certificate; give the "
                "operator --site NAME (GRID_SITE_NAME)",
            )
    declared = sorted(site.metadata.name for site in mine if not site.auto_discover)
    if len(declared) == 1:
        return LocalSite(declared[0], "the network's only declared GridSite")
    return LocalSite(
        None,
        "cannot tell which GridSite is this cluster: give the operator --site NAME "
        "(GRID_SITE_NAME), or pin this site's certificate (spec.tls.siteCertSecretRef) in "
        "its GridSite's spec.trust.certFingerprint",
    )


def auto_discovers(network: GridNetwork) -> bool:
    """Whether the network carries the auto-discover label (peers seen alive get a
    GridSite)."""
    return network.metadata.labels.get(AUTO_DISCOVER_LABEL) == "true"


def discovered_site_manifest(network: str, peer: str) -> dict[str, Any] | None:
    """The GridSite for a peer seen alive over SWIM, or None when the peer's name cannot be
    an object name. It follows SWIM (the auto-discover label) and learns its egress through
    the mesh; it is trusted only once someone pins its certificate."""
    if len(peer) > 253 or not _SITE_NAME.fullmatch(peer):
        return None
    return {
        "apiVersion": API_VERSION,
        "kind": "GridSite",
        "metadata": {
            "name": peer,
            "labels": {AUTO_DISCOVER_LABEL: "true", NETWORK_LABEL: label_value(network)},
        },
        "spec": {"gridNetworkRef": network},
    }
