"""The operator's Prometheus metrics, in a registry of its own: counters of what it did
(ConfigMap writes, status patches, Events, Secret reads, GridSites created, items
gossiped) and gauges read from the running networks at scrape time (members, trusted sites,
overlay candidates, resource phases, SWIM counters).

Labels carry names of networks, gateways, namespaces, kinds and resources, phases and
outcomes: never a key, a token or anything read from a Secret.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from grid.operator.runtime import NetworkRuntime


class OperatorMetrics:
    """Counters the operator increments as it works."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.configmap_writes = Counter(
            "grid_operator_configmap_writes",
            "ConfigMap writes by operation and outcome (a ConfigMap already up to date is "
            "not written and not counted).",
            ["operation", "outcome"],
            registry=registry,
        )
        self.status_patches = Counter(
            "grid_operator_status_patches",
            "Status patches of Grid resources by kind and outcome.",
            ["kind", "outcome"],
            registry=registry,
        )
        self.events = Counter(
            "grid_operator_events",
            "Kubernetes Events posted, by kind of object and type.",
            ["kind", "type"],
            registry=registry,
        )
        self.secret_reads = Counter(
            "grid_operator_secret_reads",
            "Secret reads by purpose (trust material or a provider credential check) and outcome.",
            ["purpose", "outcome"],
            registry=registry,
        )
        self.sites_created = Counter(
            "grid_operator_sites_created",
            "GridSites created for peers discovered over SWIM.",
            ["network"],
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "grid_operator_reconcile_errors",
            "Reconcile passes that failed unexpectedly (logged with their cause).",
            ["network"],
            registry=registry,
        )
        self.items_published = Counter(
            "grid_operator_items_published",
            "Items handed to SWIM.",
            ["network", "lane"],
            registry=registry,
        )
        self.items_received = Counter(
            "grid_operator_items_received",
            "Items received from peers, by outcome.",
            ["network", "lane", "outcome"],
            registry=registry,
        )

    def watch(self, runtimes: Callable[[], Iterable[NetworkRuntime]]) -> None:
        """Report the networks ``runtimes`` returns at every scrape."""
        self.registry.register(_NetworkCollector(runtimes))


class _NetworkCollector(Collector):
    """Gauges read from the running networks at scrape time."""

    def __init__(self, runtimes: Callable[[], Iterable[NetworkRuntime]]) -> None:
        self._runtimes = runtimes

    def collect(self) -> Iterator[GaugeMetricFamily]:
        networks = GaugeMetricFamily(
            "grid_operator_networks",
            "GridNetworks this operator runs, by SWIM state.",
            labels=["membership"],
        )
        members = GaugeMetricFamily(
            "grid_members", "Peers by SWIM state.", labels=["network", "state"]
        )
        trusted = GaugeMetricFamily(
            "grid_trusted_sites", "Peers whose certificate matched its pin.", labels=["network"]
        )
        candidates = GaugeMetricFamily(
            "grid_overlay_candidates",
            "Candidates in the current overlay.",
            labels=["network", "namespace", "gateway"],
        )
        refused = GaugeMetricFamily(
            "grid_overlay_render_refused",
            "1 while the last render or write was refused and the previous overlay is kept.",
            labels=["network", "namespace", "gateway"],
        )
        phases = GaugeMetricFamily(
            "grid_resource_phase",
            "1 for the current phase of each resource.",
            labels=["network", "kind", "name", "phase"],
        )
        swim = GaugeMetricFamily(
            "grid_swim", "SWIM node counters and gauges.", labels=["network", "name"]
        )
        running = stopped = 0
        for runtime in sorted(self._runtimes(), key=lambda r: r.name):
            name = runtime.name
            node = runtime.node
            if node is not None and node.running:
                running += 1
                for stat, value in sorted(node.stats().items()):
                    swim.add_metric([name, stat], value)
            else:
                stopped += 1
            composed = runtime.network_status
            if composed is not None:
                phases.add_metric([name, "GridNetwork", name, str(composed.phase)], 1)
            engine = runtime.engine
            if engine is None:
                continue
            states = {"alive": 0, "suspect": 0, "down": 0, "left": 0}
            for member in engine.members.values():
                states[member.state.value] += 1
            for state, count in states.items():
                members.add_metric([name, state], count)
            trusted.add_metric([name], len(engine.trusted_sites))
            for (namespace, gateway), current in sorted(engine.overlays.items()):
                count = 0 if current.overlay is None else len(current.overlay.candidates)
                candidates.add_metric([name, namespace, gateway], count)
                failed = bool(current.message or runtime.write_message(namespace, gateway))
                refused.add_metric([name, namespace, gateway], 1 if failed else 0)
            for (kind, resource), status in engine.statuses().items():
                if kind != "GridNetwork":
                    phases.add_metric([name, kind, resource, str(status.phase)], 1)
        networks.add_metric(["running"], running)
        networks.add_metric(["stopped"], stopped)
        yield from (networks, members, trusted, candidates, refused, phases, swim)
