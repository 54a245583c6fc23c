"""The gauges both shells report for each network, read from its engine and SWIM node at
scrape time: members by state, trusted sites, overlay candidates and refusals, resource
phases, SWIM counters. Labels carry names, phases and states only: never a key, a token or
anything read from a Secret."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client.core import GaugeMetricFamily

from grid.engine import GatewayOverlay, SiteEngine
from grid.membership import SwimNode

Refused = Callable[[GatewayOverlay], bool]
"""Whether a gateway's overlay is held back (its render, or the shell's write, failed)."""


class NetworkGauges:
    """The families of one scrape; add each network, then yield :meth:`families`."""

    def __init__(self, refused_help: str) -> None:
        self.members = GaugeMetricFamily(
            "grid_members", "Peers by SWIM state.", labels=["network", "state"]
        )
        self.trusted = GaugeMetricFamily(
            "grid_trusted_sites", "Peers whose certificate matched its pin.", labels=["network"]
        )
        overlay = ["network", "namespace", "gateway"]
        self.candidates = GaugeMetricFamily(
            "grid_overlay_candidates", "Candidates in the current overlay.", labels=overlay
        )
        self.refused = GaugeMetricFamily(
            "grid_overlay_render_refused", refused_help, labels=overlay
        )
        self.phases = GaugeMetricFamily(
            "grid_resource_phase",
            "1 for the current phase of each resource.",
            labels=["network", "kind", "name", "phase"],
        )
        self.swim = GaugeMetricFamily(
            "grid_swim", "SWIM node counters and gauges.", labels=["network", "name"]
        )

    def add_engine(
        self,
        network: str,
        engine: SiteEngine,
        refused: Refused,
        *,
        phases_of: Callable[[str], bool] = lambda kind: True,
    ) -> None:
        """``engine``'s members, trusted sites, overlays and the phases of the resource
        kinds ``phases_of`` accepts."""
        states = {"alive": 0, "suspect": 0, "down": 0, "left": 0}
        for member in engine.members.values():
            states[member.state.value] += 1
        for state, count in states.items():
            self.members.add_metric([network, state], count)
        self.trusted.add_metric([network], len(engine.trusted_sites))
        for (namespace, gateway), current in sorted(engine.overlays.items()):
            count = 0 if current.overlay is None else len(current.overlay.candidates)
            self.candidates.add_metric([network, namespace, gateway], count)
            self.refused.add_metric([network, namespace, gateway], 1 if refused(current) else 0)
        for (kind, name), status in engine.statuses().items():
            if phases_of(kind):
                self.add_phase(network, kind, name, str(status.phase))

    def add_phase(self, network: str, kind: str, name: str, phase: str) -> None:
        self.phases.add_metric([network, kind, name, phase], 1)

    def add_node(self, network: str, node: SwimNode | None) -> bool:
        """The node's counters, when it runs; whether it does."""
        if node is None or not node.running:
            return False
        for stat, value in sorted(node.stats().items()):
            self.swim.add_metric([network, stat], value)
        return True

    def families(self) -> tuple[GaugeMetricFamily, ...]:
        return (self.members, self.trusted, self.candidates, self.refused, self.phases, self.swim)
