"""Auto-discovery: a GridSite for each peer seen alive that has none, when the network
carries the auto-discover label (grid.operator.sites)."""

from __future__ import annotations

import logging

from grid.engine import SiteEngine
from grid.errors import KubernetesApiError
from grid.models.network import GridNetwork
from grid.operator.shared import Shared
from grid.operator.sites import auto_discovers, discovered_site_manifest
from grid.runtime.notices import Notices


class SiteDiscovery:
    """One network's discovered peers, each tried once while it stays discovered."""

    def __init__(self, name: str, shared: Shared, notices: Notices) -> None:
        self._name = name
        self._shared = shared
        self._notices = notices
        self._tried: set[str] = set()

    async def discover(self, engine: SiteEngine, network: GridNetwork) -> None:
        """A GridSite for each peer seen alive that has none, when the network carries the
        auto-discover label."""
        if not auto_discovers(network):
            return
        cache, kube, metrics = self._shared.cache, self._shared.kube, self._shared.metrics
        discovered = set(engine.discovered_sites)
        self._tried &= discovered
        for peer in sorted(discovered - self._tried):
            self._tried.add(peer)
            topic = f"discovery {peer}"
            existing = cache.get("GridSite", peer)
            if existing is not None:
                self._notices.say(
                    topic,
                    f"peer {peer} is alive but GridSite {peer} belongs to network "
                    f"{existing.network_ref}: not created",
                    logging.WARNING,
                )
                continue
            manifest = discovered_site_manifest(self._name, peer)
            if manifest is None:
                self._notices.say(
                    topic,
                    "a peer's name is not a valid GridSite name: not created",
                    logging.WARNING,
                )
                continue
            try:
                created = await kube.create_site(manifest)
            except KubernetesApiError as error:
                self._tried.discard(peer)
                self._notices.say(topic, str(error), logging.WARNING)
                continue
            if created is not None:
                metrics.sites_created.labels(self._name).inc()
                self._notices.say(topic, f"created GridSite {peer} for a peer seen alive")
